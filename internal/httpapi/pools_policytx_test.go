package httpapi_test

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quotacenter/quota-center/internal/mysqlstore"
	"github.com/quotacenter/quota-center/internal/testenv"
)

// failSettingsWrites makes the policy store refuse every write of res's
// pool settings (a trigger), as a database failing between the policy's
// row and its settings would; the returned func lifts it.
func failSettingsWrites(t *testing.T, db *mysqlstore.Store, res string) func() {
	t.Helper()
	h := fnv.New32a()
	_, _ = h.Write([]byte(res))
	name := fmt.Sprintf("fail_settings_%08x", h.Sum32()) // MySQL names: at most 64 characters
	ddl := fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON quota_pool_settings
		WHEN NEW.resource_name = '%s' BEGIN SELECT RAISE(ABORT, 'injected: settings write failed'); END`, name, res)
	if db.DB().DriverName() == "mysql" {
		ddl = fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON quota_pool_settings FOR EACH ROW
			BEGIN IF NEW.resource_name = '%s' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected: settings write failed'; END IF; END`, name, res)
	}
	if _, err := db.DB().ExecContext(t.Context(), ddl); err != nil {
		t.Fatalf("create trigger: %v", err)
	}
	lift := func() {
		if _, err := db.DB().Exec(`DROP TRIGGER IF EXISTS ` + name); err != nil {
			t.Errorf("drop trigger: %v", err)
		}
	}
	t.Cleanup(lift)
	return lift
}

// TestAPolicyPutStoresItsLimitAndPoolsTogether: a policy PUT with "pools"
// on a resource with lines stored the policy (its new limit) in one
// transaction and the pool settings in another: when the second failed
// the answer was a 5xx but the new limit was stored and live, with the old
// settings (a half-applied policy). Now the settings are written in the
// policy's transaction: with their write failing the PUT is a 5xx JSON
// error and the policy, the settings, the layout and Redis' limit are as
// they were; once the store is well again the same PUT stores both. Dev
// mode (SQLite, miniredis) and real MariaDB and Redis.
func TestAPolicyPutStoresItsLimitAndPoolsTogether(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, db *mysqlstore.Store, res string) {
		a := startPoolsAPI(t, rdb, db)
		base := "/admin/policies/" + res
		a.putPolicy(t, res, `{"quotaType":"TOKENS","totalLimit":100000}`)
		a.mustOK(t, request{method: http.MethodPut, path: base + "/lines/search", body: `{"tier":"CORE","weight":1}`})
		polBefore, poolsBefore := string(a.get(t, base).raw), string(a.get(t, base+"/pools").raw)
		limitKey := "qc:{" + res + "}:limit"
		redisBefore, err := rdb.Get(t.Context(), limitKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		put := request{method: http.MethodPut, path: base, body: `{"quotaType":"TOKENS","totalLimit":200000,` +
			`"pools":{"sharedPercent":50,"dedicatedPercent":40,"bufferPercent":10}}`}
		lift := failSettingsWrites(t, db, res)
		r := a.do(t, put)
		if r.status/100 != 5 || r.body["code"] == nil || r.body["success"] != false {
			t.Fatalf("PUT with the settings' write failing: %d %s, want a 5xx JSON error", r.status, r.raw)
		}
		t.Logf("answered %d %s", r.status, r.raw)
		if got := string(a.get(t, base).raw); got != polBefore {
			t.Errorf("policy after the failed PUT:\n %s\nwant as before:\n %s", got, polBefore)
		}
		if got := string(a.get(t, base+"/pools").raw); got != poolsBefore {
			t.Errorf("pools after the failed PUT:\n %s\nwant as before:\n %s", got, poolsBefore)
		}
		if got, err := rdb.Get(t.Context(), limitKey).Result(); err != nil || got != redisBefore {
			t.Errorf("Redis' limit after the failed PUT: %q %v, want %q", got, err, redisBefore)
		}
		lift()
		a.mustOK(t, put)
		if r := a.get(t, base); num(t, r, "totalLimit") != 200000 {
			t.Errorf("policy after the retry: %s", r.raw)
		}
		if r := a.get(t, base+"/pools"); num(t, r, "shared") != 100000 || num(t, r, "dedicated") != 80000 {
			t.Errorf("pools after the retry: %s", r.raw)
		}
		if got, err := rdb.Get(t.Context(), limitKey).Result(); err != nil || got != "200000" {
			t.Errorf("Redis' limit after the retry: %q %v", got, err)
		}
	}
	t.Run("dev", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		run(t, rdb, newSQLite(t), "ptx")
	})
	t.Run("real", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.MustRedis(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		sql, err := mysqlstore.Open(t.Context(), testenv.MustMySQL(t), mysqlstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sql.Close() })
		if err := sql.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		run(t, rdb, sql, testenv.Resource(t))
	})
}
