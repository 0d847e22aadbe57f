// Package lua holds the Redis Lua scripts of the store's fast gate (package
// store-server/gate), embedded in the binary.
//
// Redis runs each script atomically. Every key a script touches is passed in KEYS and
// carries the store's hash tag, so the scripts run unchanged on a Redis Cluster; time comes
// from Redis TIME inside the script, never from the caller; money goes from ARGV to
// HINCRBY as decimal text and never through a Lua number. Redis 5 or later is required
// (scripts are replicated by their effects, which calling TIME before writing needs).
//
// lib.lua, ops.lua and proj.lua are helpers, not scripts: the exported sources below are the
// scripts as sent to Redis, each helper prepended. This package does no I/O.
package lua

import "embed"

// FS holds the script files as written.
//
//go:embed *.lua
var FS embed.FS

// The scripts as run by Redis. See each file's header for its KEYS, ARGV and reply.
var (
	// Exec decides a group of scans, sales and refunds in order, in one atomic call:
	// lib.lua + ops.lua + proj.lua + exec.lua.
	Exec = source("lib.lua", "ops.lua", "proj.lua", "exec.lua")
	// Allow is the three-layer limiter alone: lib.lua + allow.lua.
	Allow = source("lib.lua", "allow.lua")
	// Adjust applies a stock adjustment once per id: proj.lua + adjust.lua.
	Adjust = source("proj.lua", "adjust.lua")
	// Rebuild sets stock, counters and flow numbers from a ledger snapshot, and the
	// projection marker the other scripts check: rebuild.lua.
	Rebuild = source("rebuild.lua")
)

// source concatenates embedded files; a missing file is a build mistake and panics at init.
func source(names ...string) string {
	var s string
	for _, n := range names {
		b, err := FS.ReadFile(n)
		if err != nil {
			panic("lua: " + err.Error())
		}
		s += string(b) + "\n"
	}
	return s
}
