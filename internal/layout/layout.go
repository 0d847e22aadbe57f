// Package layout holds the rules of posgate's source tree that a test can check: which
// package may import which (docs/architecture.md, "Packages and the import rule") and how
// large a file or a function may grow. It has no code of its own beyond the rule table; the
// checks are its tests, run by `make test` and by `go test -short ./...`.
package layout

import "strings"

// Module is posgate's module path.
const Module = "github.com/posgate/posgate"

// Room names the part of the tree a package belongs to: a binary's packages, the shared
// packages below every binary, or the top (end-to-end support and the demo).
type Room string

// The rooms, from the bottom up.
const (
	Shared   Room = "shared"         // internal/, lua/, schema/: what two binaries share
	Terminal Room = "terminal-agent" // the till's daemon
	Store    Room = "store-server"   // the store's daemon, its uploader among its packages
	HQ       Room = "hq-sync"        // the HQ command (serve, reconcile) and the upload command
	Top      Room = "top"            // e2e/ and demo/: run the binaries, may import anything
	Outside  Room = ""               // not a package of the module
)

// RoomOf returns the room of a package path.
func RoomOf(path string) Room {
	rel, ok := strings.CutPrefix(path, Module+"/")
	if !ok {
		return Outside
	}
	first, _, _ := strings.Cut(rel, "/")
	switch first {
	case "internal", "lua", "schema":
		return Shared
	case "terminal-agent":
		return Terminal
	case "store-server":
		return Store
	case "hq-sync":
		return HQ
	case "e2e", "demo":
		return Top
	}
	return Outside
}

// Crossings are the imports across binaries the rule allows, each with its reason: the
// command that runs at the store but ships in hq-sync reaches the store's uploader.
var Crossings = map[[2]string]string{
	{Module + "/hq-sync", Module + "/store-server/upload"}: "hq-sync upload runs the store's uploader",
}

// Allowed reports whether package from may import package to (both full import paths).
// Shared packages import only shared ones; a binary's packages import shared ones and their
// own binary's; the top imports anything. Imports outside the module are not the rule's.
func Allowed(from, to string) bool {
	rf, rt := RoomOf(from), RoomOf(to)
	switch {
	case rt == Outside || rf == Top:
		return true
	case rt == Top:
		return false
	case rt == Shared:
		return true
	case rf == rt:
		return true
	}
	_, ok := Crossings[[2]string{from, to}]
	return ok
}
