// Package disk says how much room is left on the file system of a directory: a full disk
// under a ledger or an outbox stops every commit, and the people who can free room should
// hear of it before.
package disk

import "errors"

// ErrUnknown is returned where the system gives no figure.
var ErrUnknown = errors.New("disk: free space unknown on this system")

// Space is a file system's size and the room left to an unprivileged process.
type Space struct {
	Total int64 `json:"total_bytes"`
	Free  int64 `json:"free_bytes"`
}

// Of returns the space of the file system holding dir.
func Of(dir string) (Space, error) { return of(dir) }
