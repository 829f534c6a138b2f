package redisstore

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// scriptVars names every script variable by its file, so that the tests can
// swap in checked versions (see checkDeclaredKeys).
var scriptVars = map[string]**redis.Script{
	"apply.lua": &applyScript, "heartbeat.lua": &heartbeatScript, "finish.lua": &finishScript,
	"cancel.lua": &cancelScript, "seed.lua": &seedScript, "balance.lua": &balanceScript,
	"expired.lua": &expiredScript, "sweep.lua": &sweepScript, "unlock.lua": &unlockScript,
	"adjust.lua": &adjustScript, "lock.lua": &lockScript, "failopen.lua": &failOpenScript, "failopen_scope.lua": &failOpenScopeScript,
	"drop.lua": &dropScript, "apply_batch.lua": &applyBatchScript,
	"pool_layout.lua": &poolLayoutScript, "pool_seed.lua": &poolSeedScript,
	"pool_move.lua": &poolMoveScript, "pool_grants.lua": &poolGrantsScript, "pool_close.lua": &poolCloseScript,
	"charge.lua": &chargeScript, "uncharge.lua": &unchargeScript,
}

// keyCheck is put in front of a script by declaredKeysOnly: every
// redis.call of the script goes through qc_call, which fails the script
// (before the command runs) when its key is not in KEYS. Every command the
// scripts use takes its one key first, except TIME.
const keyCheck = `local qc_declared = {}
for _, k in ipairs(KEYS) do qc_declared[k] = true end
local function qc_call(cmd, key, ...)
  if cmd == 'TIME' then
    return redis.call('TIME')
  end
  if not qc_declared[key] then
    error('undeclared key ' .. tostring(key) .. ' (' .. cmd .. ')')
  end
  return redis.call(cmd, key, ...)
end
`

// declaredKeysOnly returns src with every redis.call checked by keyCheck.
func declaredKeysOnly(src string) string {
	return keyCheck + strings.ReplaceAll(src, "redis.call(", "qc_call(")
}

// checkDeclaredKeys swaps every script for its declaredKeysOnly version, so
// that every test of this package, on real Redis and on miniredis, fails if
// a script touches a key its caller did not declare (Redis Cluster routes a
// script by its KEYS, and a key it does not declare may live on another
// node). TestMain calls it before any test runs.
func checkDeclaredKeys() {
	for name, v := range scriptVars {
		*v = redis.NewScript(declaredKeysOnly(source(name)))
	}
}

func TestEveryScriptIsCheckedForUndeclaredKeys(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(scriptFS, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimPrefix(f, "scripts/")
		v, ok := scriptVars[name]
		if !ok {
			t.Errorf("%s is not in scriptVars: its keys are not checked", name)
			continue
		}
		if !strings.HasPrefix((*v).Hash(), redis.NewScript(declaredKeysOnly(source(name))).Hash()) {
			t.Errorf("%s runs unchecked", name)
		}
	}
	if len(files) != len(scriptVars) {
		t.Errorf("%d scripts, %d in scriptVars", len(files), len(scriptVars))
	}
}

func TestTheKeyCheckRefusesAnUndeclaredKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		sc := redis.NewScript(declaredKeysOnly(`redis.call('SET', KEYS[1], 'a')
redis.call('SET', KEYS[1] .. ':other', 'b')
return 1`))
		key := prefix(e.res) + "probe"
		err := sc.Run(ctxT(t), e.rdb, []string{key}).Err()
		if err == nil || !strings.Contains(err.Error(), "undeclared key "+key+":other") {
			t.Fatalf("err = %v, want the undeclared key named", err)
		}
		if n, _ := e.rdb.Exists(ctxT(t), key+":other").Result(); n != 0 {
			t.Fatal("the undeclared key was written")
		}
		if v, err := sc.Run(ctxT(t), e.rdb, []string{key, key + ":other"}).Int(); err != nil || v != 1 {
			t.Fatalf("with both keys declared: %v, %v", v, err)
		}
	})
}
