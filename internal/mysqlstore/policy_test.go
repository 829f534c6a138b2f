package mysqlstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotacenter/quota-center/internal/quota"
)

var t0 = time.Date(2025, 3, 1, 8, 30, 0, 0, time.UTC)

func testPolicy(name string, limit int64, at time.Time) quota.Policy {
	return quota.Policy{
		ResourceName:         name,
		QuotaType:            quota.TypeTokens,
		TotalLimit:           limit,
		ResetCron:            "0 0 * * *",
		Timezone:             "Asia/Shanghai",
		LeakThresholdSeconds: 300,
		FailMode:             quota.FailOpen,
		CreatedAt:            at,
		UpdatedAt:            at,
	}
}

func TestPutPolicy(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		shanghai := time.FixedZone("CST", 8*3600)

		// Create: sub-millisecond digits are truncated, the zone becomes UTC.
		in := testPolicy("gpu.a100", 3600, t0.Add(999*time.Microsecond+999).In(shanghai))
		got, created, err := s.PutPolicy(ctx, in)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		want := testPolicy("gpu.a100", 3600, t0)
		if !created || got != want {
			t.Fatalf("create = %+v, %v; want %+v, true", got, created, want)
		}

		// Update: new values, CreatedAt of the request is ignored.
		upd := quota.Policy{
			ResourceName: "gpu.a100", QuotaType: quota.TypeDuration, TotalLimit: 7200,
			Timezone: "UTC", LeakThresholdSeconds: 60, FailMode: quota.FailClosed,
			CreatedAt: t0.Add(time.Hour), UpdatedAt: t0.Add(2 * time.Hour),
		}
		got, created, err = s.PutPolicy(ctx, upd)
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		wantUpd := upd
		wantUpd.CreatedAt = t0
		if created || got != wantUpd {
			t.Fatalf("update = %+v, %v; want %+v, false", got, created, wantUpd)
		}
		read, err := s.GetPolicy(ctx, "gpu.a100")
		if err != nil || read != wantUpd {
			t.Fatalf("GetPolicy = %+v, %v; want %+v", read, err, wantUpd)
		}

		// List is ordered by name.
		for _, n := range []string{"zeta", "alpha"} {
			if _, _, err := s.PutPolicy(ctx, testPolicy(n, 1, t0)); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.ListPolicies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list {
			names = append(names, p.ResourceName)
		}
		if fmt.Sprint(names) != "[alpha gpu.a100 zeta]" {
			t.Fatalf("ListPolicies names = %v", names)
		}
		if list[1] != wantUpd {
			t.Fatalf("listed %+v; want %+v", list[1], wantUpd)
		}
	})
}

// A PUT of the stored settings writes nothing: the stored policy comes
// back with its UpdatedAt (the policyVersion clients see), while a PUT that
// changes one setting, even only a trailing space, is stored.
func TestPutPolicySameSettingsKeepsUpdatedAt(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		orig, _, err := s.PutPolicy(ctx, testPolicy("r", 10, t0))
		if err != nil {
			t.Fatal(err)
		}
		same := testPolicy("r", 10, t0.Add(time.Hour))
		same.FailMode = quota.FailOpen
		got, created, err := s.PutPolicy(ctx, same)
		if err != nil || created || got != orig {
			t.Fatalf("same settings = %+v, %v, %v; want the stored %+v, false", got, created, err, orig)
		}
		if read, err := s.GetPolicy(ctx, "r"); err != nil || read != orig {
			t.Fatalf("GetPolicy = %+v, %v; want %+v", read, err, orig)
		}

		spaced := testPolicy("r", 10, t0.Add(2*time.Hour))
		spaced.ResetCron += " "
		got, _, err = s.PutPolicy(ctx, spaced)
		if err != nil || !got.UpdatedAt.Equal(t0.Add(2*time.Hour)) {
			t.Fatalf("changed cron = %+v, %v; want updated at %v", got, err, t0.Add(2*time.Hour))
		}
		if read, err := s.GetPolicy(ctx, "r"); err != nil || read.ResetCron != spaced.ResetCron || !read.UpdatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("GetPolicy = %+v, %v; want resetCron %q updated at %v", read, err, spaced.ResetCron, got.UpdatedAt)
		}
	})
}

func TestPutPolicyDefaultsTimes(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		before := time.Now().Truncate(time.Millisecond)
		got, created, err := s.PutPolicy(ctx, testPolicy("r", 1, time.Time{}))
		if err != nil || !created {
			t.Fatalf("PutPolicy = %v, %v", created, err)
		}
		if got.CreatedAt.Before(before) || got.CreatedAt != got.UpdatedAt ||
			got.CreatedAt.Location() != time.UTC || got.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Fatalf("times = %v / %v; want equal UTC ms times after %v", got.CreatedAt, got.UpdatedAt, before)
		}
		read, err := s.GetPolicy(ctx, "r")
		if err != nil || read != got {
			t.Fatalf("GetPolicy = %+v, %v; want %+v", read, err, got)
		}
	})
}

func TestGetPolicyNotFound(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		_, err := s.GetPolicy(testCtx(t), "missing")
		if !errors.Is(err, quota.ErrResourceNotFound) {
			t.Fatalf("err = %v; want ErrResourceNotFound", err)
		}
		list, err := s.ListPolicies(testCtx(t))
		if err != nil || list == nil || len(list) != 0 {
			t.Fatalf("ListPolicies = %#v, %v; want empty non-nil", list, err)
		}
	})
}

func TestPutPolicyConcurrentSameName(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		const n = 16
		type result struct {
			p       quota.Policy
			created bool
			err     error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				in := testPolicy("shared", int64(i+1), t0.Add(time.Duration(i)*time.Second))
				p, created, err := s.PutPolicy(ctx, in)
				results[i] = result{p, created, err}
			})
		}
		wg.Wait()

		creator := -1
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("put %d: %v", i, r.err)
			}
			if r.created {
				if creator >= 0 {
					t.Fatalf("puts %d and %d both created", creator, i)
				}
				creator = i
			}
		}
		if creator < 0 {
			t.Fatal("no put reported created")
		}
		createdAt := t0.Add(time.Duration(creator) * time.Second)
		for i, r := range results {
			if r.p.CreatedAt != createdAt || r.p.TotalLimit != int64(i+1) {
				t.Fatalf("put %d returned %+v; want CreatedAt %v, limit %d", i, r.p, createdAt, i+1)
			}
		}
		stored, err := s.GetPolicy(ctx, "shared")
		if err != nil {
			t.Fatal(err)
		}
		if stored.CreatedAt != createdAt || stored != results[stored.TotalLimit-1].p {
			t.Fatalf("stored %+v is not one of the writes with CreatedAt %v", stored, createdAt)
		}
		list, err := s.ListPolicies(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("ListPolicies = %d rows, %v; want 1", len(list), err)
		}
	})
}

// Creates of one new name racing each other: exactly one reports created
// and its row is the one stored; every other writes nothing.
func TestCreatePolicyConcurrentSameName(t *testing.T) {
	forEachBackend(t, Options{}, func(t *testing.T, s *Store) {
		ctx := testCtx(t)
		const n = 16
		created := make([]bool, n)
		errs := make([]error, n)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range n {
			wg.Go(func() {
				start.Wait()
				_, created[i], errs[i] = s.CreatePolicy(ctx, testPolicy("new", int64(i+1), t0))
			})
		}
		start.Done()
		wg.Wait()
		winner := -1
		for i := range n {
			switch {
			case errs[i] != nil:
				t.Fatalf("create %d: %v", i, errs[i])
			case created[i] && winner >= 0:
				t.Fatalf("creates %d and %d both created", winner, i)
			case created[i]:
				winner = i
			}
		}
		if winner < 0 {
			t.Fatal("no create reported created")
		}
		if p, err := s.GetPolicy(ctx, "new"); err != nil || p.TotalLimit != int64(winner+1) {
			t.Fatalf("stored %+v, %v; the create that reported created had limit %d", p, err, winner+1)
		}
		p, again, err := s.CreatePolicy(ctx, testPolicy("new", 999, t0))
		if err != nil || again || p != (quota.Policy{}) {
			t.Fatalf("a create of an existing name: %+v, %v, %v", p, again, err)
		}
		if p, err := s.GetPolicy(ctx, "new"); err != nil || p.TotalLimit != int64(winner+1) {
			t.Fatalf("a refused create changed the policy: %+v, %v", p, err)
		}
	})
}
