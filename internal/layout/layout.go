// Package layout holds the rules of posgate's source tree that a test can check: which
// package may import which (docs/architecture.md, "Packages and the import rule") and how
// large a file or a function may grow. It has no code of its own beyond the rule table; the
// checks are its tests, run by `make test` and by `go test -short ./...`.
package layout

import "strings"

// Module is posgate's module path.
const Module = "github.com/posgate/posgate"

// Room names the part of the tree a package belongs to. The rooms are ordered as the data
// flows: what the till holds reaches the store, what the store holds reaches HQ, and the
// top runs them all. A package may import packages of its own room and of rooms before it,
// never after: the store may read the till's contracts, the HQ command may read the store's
// ledger (its uploader runs at the store), and no code below the top imports the harness
// (tests may: AllowedInTest).
type Room int

// The rooms, in order.
const (
	Outside  Room = iota // not a package of the module
	Shared               // internal/, lua/, schema/: what two binaries share
	Terminal             // terminal-agent/: the till's daemon
	Store                // store-server/: the store's daemon
	HQ                   // hq-sync/: the uploader (at the store), serve and reconcile (at HQ)
	Top                  // e2e/ and demo/: run the binaries, may import anything
)

var roomNames = [...]string{"outside", "shared", "terminal-agent", "store-server", "hq-sync", "top"}

// String names the room.
func (r Room) String() string { return roomNames[r] }

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
	case "e2e", "demo", "deploy":
		return Top
	}
	return Outside
}

// Allowed reports whether package from may import package to (both full import paths): to
// is outside the module, or in from's room or a room before it. A shared package imports
// shared packages only.
func Allowed(from, to string) bool {
	rt := RoomOf(to)
	return rt == Outside || rt <= RoomOf(from)
}

// Harness is the end-to-end harness, the one package of the top that tests below it may
// import, with its own packages (e2e/browser, the pages' browser): a binary's end-to-end
// tests live beside its code and run the real binaries through it.
const Harness = Module + "/e2e"

// AllowedInTest reports whether a test of package from may import package to: what its code
// may, and the harness.
func AllowedInTest(from, to string) bool {
	return Allowed(from, to) || to == Harness || strings.HasPrefix(to, Harness+"/")
}
