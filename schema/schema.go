// Package schema embeds posgate's SQL migrations: terminal/ for the terminal-agent's outbox,
// store/ for the store ledger and hq/ for the HQ receiver. Files are named NNN_name.sql and are
// applied in name order by package sqlitedb; a migration that has landed is never edited.
package schema

import (
	"embed"
	"io/fs"
)

//go:embed terminal/*.sql store/*.sql hq/*.sql
var files embed.FS

// Terminal returns the terminal-agent's migrations.
func Terminal() fs.FS { return sub("terminal") }

// Store returns the store ledger's migrations.
func Store() fs.FS { return sub("store") }

// HQ returns the migrations of HQ's SQLite database (hq-sync serve); the PostgreSQL engine
// keeps its own DDL next to its code.
func HQ() fs.FS { return sub("hq") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return f
}
