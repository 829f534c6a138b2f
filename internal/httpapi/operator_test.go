package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/quotacenter/quota-center/internal/admin"
	"github.com/quotacenter/quota-center/internal/httpapi"
	"github.com/quotacenter/quota-center/internal/period"
	"github.com/quotacenter/quota-center/internal/quota"
	"github.com/quotacenter/quota-center/internal/redisstore"
)

// failingOps is an Operator whose every call fails with err.
type failingOps struct{ err error }

func (f failingOps) Sessions(context.Context, admin.SessionQuery) (admin.SessionPage, error) {
	return admin.SessionPage{}, f.err
}
func (f failingOps) Usage(context.Context, admin.UsageQuery) (admin.Usage, error) {
	return admin.Usage{}, f.err
}
func (f failingOps) Forecast(context.Context, quota.StatusResponse) (admin.Forecast, error) {
	return admin.Forecast{}, f.err
}
func (f failingOps) PatchPolicy(context.Context, string, []byte, bool, string) (quota.Policy, error) {
	return quota.Policy{}, f.err
}
func (f failingOps) Reset(context.Context, string, string) (quota.Period, quota.Period, error) {
	return quota.Period{}, quota.Period{}, f.err
}
func (f failingOps) ForceFinish(context.Context, admin.FinishRequest) (quota.FinishResponse, quota.UsageRecord, error) {
	return quota.FinishResponse{}, quota.UsageRecord{}, f.err
}
func (f failingOps) DeletePolicy(context.Context, string, string) (quota.Policy, error) {
	return quota.Policy{}, f.err
}

// opsAPI is a server on miniredis and SQLite with ops as its Operator.
func opsAPI(t *testing.T, ops httpapi.Operator) *testAPI {
	t.Helper()
	sql := newSQLite(t)
	svc := quota.NewService(redisstore.New(newMiniredis(t)), sql, sql, &period.Scheduler{}, quota.Options{})
	srv := httpapi.New(httpapi.Deps{Service: svc, Logger: zap.NewNop(), Operator: ops})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{URL: ts.URL, srv: srv}
}

func TestOperatorFailuresMapToClearAnswers(t *testing.T) {
	t.Run("a forecast that cannot be read leaves burnRate and exhaustsAt null", func(t *testing.T) {
		h := opsAPI(t, failingOps{err: quota.ErrUnavailable})
		h.putPolicy(t, "gpu", `{"quotaType":"COUNT","totalLimit":10}`)
		r := h.status(t, "gpu")
		if r.status != http.StatusOK || r.body["burnRate"] != nil || r.body["exhaustsAt"] != nil {
			t.Fatalf("status %d %v", r.status, r.body)
		}
		if _, ok := r.body["burnRate"]; !ok {
			t.Fatalf("burnRate missing: %v", r.body)
		}
	})
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"in use", errors.Join(admin.ErrInUse, errors.New("3 live sessions")), http.StatusConflict, httpapi.CodePolicyInUse},
		{"a backend down", quota.ErrUnavailable, http.StatusServiceUnavailable, httpapi.CodeBackendUnavailable},
		{"not found", quota.ErrResourceNotFound, http.StatusNotFound, httpapi.CodeResourceNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := opsAPI(t, failingOps{err: tc.err})
			for _, rq := range []request{
				{method: http.MethodGet, path: "/admin/sessions?resourceName=gpu"},
				{method: http.MethodGet, path: "/admin/usage?resourceName=gpu"},
				{method: http.MethodPatch, path: "/admin/policies/gpu", body: `{"totalLimit":5}`},
				{method: http.MethodDelete, path: "/admin/policies/gpu"},
				{method: http.MethodPost, path: "/admin/policies/gpu/reset", body: `{}`},
				{method: http.MethodPost, path: "/admin/sessions/s1/finish", body: `{}`},
			} {
				r := h.do(t, rq)
				if r.status != tc.status || r.body["code"] != tc.code {
					t.Errorf("%s %s: %d %v; want %d %s", rq.method, rq.path, r.status, r.body, tc.status, tc.code)
				}
			}
		})
	}
	t.Run("a server without an Operator answers 501", func(t *testing.T) {
		h := opsAPI(t, nil)
		r := h.do(t, request{method: http.MethodGet, path: "/admin/sessions?resourceName=gpu"})
		if r.status != http.StatusNotImplemented || r.body["code"] != httpapi.CodeNotImplemented {
			t.Fatalf("%d %v", r.status, r.body)
		}
	})
}
