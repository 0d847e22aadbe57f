// Package schema embeds the migrations of every posgate database: terminal/ for the
// terminal-agent's outbox, store/ for the store ledger, upload/ for hq-sync upload's state
// (kept at the store beside the ledger), hq/ for HQ's SQLite database and hqpg/ for HQ's
// PostgreSQL database (hq-sync serve and reconcile). Files are named NNN_name.sql and are
// applied in name order, each in its own transaction: the SQLite ones by package sqlitedb,
// the PostgreSQL ones by HQ's PostgreSQL engine. A migration that has landed is never
// edited.
package schema

import (
	"embed"
	"io/fs"
)

//go:embed terminal/*.sql store/*.sql upload/*.sql hq/*.sql hqpg/*.sql
var files embed.FS

// Terminal returns the terminal-agent's migrations.
func Terminal() fs.FS { return sub("terminal") }

// Store returns the store ledger's migrations.
func Store() fs.FS { return sub("store") }

// Upload returns the migrations of hq-sync upload's state database.
func Upload() fs.FS { return sub("upload") }

// HQ returns the migrations of HQ's SQLite database (hq-sync serve).
func HQ() fs.FS { return sub("hq") }

// HQPostgres returns the migrations of HQ's PostgreSQL database (hq-sync serve): the same
// tables and meaning as HQ's, in PostgreSQL's DDL.
func HQPostgres() fs.FS { return sub("hqpg") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return f
}
