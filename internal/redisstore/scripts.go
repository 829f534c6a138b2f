package redisstore

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua scripts/*.lib
var scriptFS embed.FS

// includePrefix starts a script line that source replaces with the named
// .lib file of scripts/ (Lua code two scripts share; a script sent to Redis
// is one self-contained text).
const includePrefix = "-- include "

// source reads an embedded script, with its includes in place.
func source(name string) string { return sourceWith(name, nil) }

// sourceWith is source with some includes swapped: swap maps a .lib named
// by an include line to the .lib put there instead (a variant of a script).
func sourceWith(name string, swap map[string]string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	lines := strings.SplitAfter(string(b), "\n")
	for i, l := range lines {
		if lib, ok := strings.CutPrefix(strings.TrimSpace(l), includePrefix); ok {
			if alt, ok := swap[lib]; ok {
				lib = alt
			}
			lines[i] = sourceWith(lib, swap) + "\n"
		}
	}
	return strings.Join(lines, "")
}

func load(name string) *redis.Script { return redis.NewScript(source(name)) }

// The scripts, one per change; each .lua starts with its contract (KEYS,
// ARGV, reply), and replies.go has its decoder. Every key a script touches
// is in its KEYS, and all of them share the resource's {r} hash tag, so a
// call runs on the one Redis Cluster node that holds the resource's slot.
var (
	applyScript         = load("apply.lua")
	heartbeatScript     = load("heartbeat.lua")
	finishScript        = load("finish.lua")
	cancelScript        = load("cancel.lua")
	seedScript          = load("seed.lua")
	balanceScript       = load("balance.lua")
	expiredScript       = load("expired.lua")
	sweepScript         = load("sweep.lua")
	unlockScript        = load("unlock.lua")
	adjustScript        = load("adjust.lua")
	lockScript          = load("lock.lua")
	failOpenScript      = load("failopen.lua")
	failOpenScopeScript = load("failopen_scope.lua")
	dropScript          = load("drop.lua")

	// applyHashScript is apply.lua whose fast path writes a new session in
	// the full form, as builds before the packed record did
	// (Store.HashSessions; scripts/session_record.lib).
	applyHashScript = redis.NewScript(sourceWith("apply.lua", map[string]string{"fast_session.lib": "fast_session_hash.lib"}))
)
