//go:build unix

package stack

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgres starts PostgreSQL, writes through pgx, stops and restarts it (fast
// shutdown), kills it and restarts it (crash recovery keeps every committed row), and
// checks that Close leaves no process behind.
func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	dir := t.TempDir() // 0700, as t.TempDir makes it: the postgres OS user must still get in
	s := Run(t, Options{Dir: dir, Postgres: true, PostgresSettings: []string{"max_wal_size = '3GB'"}})
	if s.Postgres == nil || len(s.Redis) != 0 || s.Mosquitto != nil {
		t.Fatalf("stack: postgres %v, %d redis, mosquitto %v", s.Postgres, len(s.Redis), s.Mosquitto)
	}
	url := s.PostgresURL()
	if want := "postgres://postgres@" + s.Postgres.Addr() + "/posgate?sslmode=disable"; url != want {
		t.Fatalf("PostgresURL = %q, want %q", url, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "pg", "data", "PG_VERSION")); err != nil || fi.IsDir() {
		t.Fatalf("no cluster in Dir/pg/data: %v", err)
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func() int {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(`CREATE TABLE t (id int PRIMARY KEY)`)
	exec(`INSERT INTO t VALUES (1)`)
	show := func(name string) string {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var v string
		if err := c.QueryRow(ctx, `SHOW `+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := show("fsync"); v != "on" {
		t.Errorf("fsync = %q, want on", v)
	}
	if v := show("max_wal_size"); v != "3GB" { // Options.PostgresSettings
		t.Errorf("max_wal_size = %q, want 3GB", v)
	}

	// Stop (fast shutdown) and Start: same port, same data.
	port, pid := s.Postgres.Port, s.Postgres.Pid()
	if err := s.Postgres.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Postgres.Running() {
		t.Fatal("postgres running after Stop")
	}
	checkGone(t, []int{pid})
	if c, err := net.DialTimeout("tcp", s.Postgres.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("postgres port still accepts connections after Stop")
	}
	if err := s.Postgres.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Postgres.Port != port {
		t.Fatalf("port changed from %d to %d", port, s.Postgres.Port)
	}
	if err := s.Postgres.Start(ctx); err == nil {
		t.Fatal("second Start of a running postgres succeeded")
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows after restart, want 1", n)
	}
	if v := show("max_wal_size"); v != "3GB" {
		t.Errorf("max_wal_size = %q after a restart, want 3GB", v)
	}

	// Kill (a crash, backends included) and Start: crash recovery keeps the committed row.
	exec(`INSERT INTO t VALUES (2)`)
	pid = s.Postgres.Pid()
	if err := s.Postgres.Kill(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, []int{pid})
	if err := s.Postgres.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d rows after a crash, want 2", n)
	}

	pid = s.Postgres.Pid()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, []int{pid})
	if _, err := pgx.Connect(ctx, url); err == nil {
		t.Error("connected after Close")
	}
}

// TestPostgresMissing checks that missing postgres binaries are an error naming them and
// `make test`, never a skip.
func TestPostgresMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	orig := postgresGlob
	t.Cleanup(func() { postgresGlob = orig })
	postgresGlob = filepath.Join(t.TempDir(), "*", "bin")
	_, err := Start(context.Background(), Options{Postgres: true})
	if err == nil {
		t.Fatal("Start succeeded without postgres")
	}
	for _, want := range []string{"postgres", "initdb", "make test", "postgresql"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestLookPostgres finds the newest version when PATH has none, and pairs postgres with the
// initdb of its own directory.
func TestLookPostgres(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9", "12", "16"} {
		d := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"postgres", "initdb"} {
			if v == "16" && b == "initdb" {
				continue // incomplete: not chosen
			}
			if err := os.WriteFile(filepath.Join(d, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", t.TempDir())
	orig := postgresGlob
	t.Cleanup(func() { postgresGlob = orig })
	postgresGlob = filepath.Join(root, "*", "bin")
	pg, initdb, err := lookPostgres()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "12", "bin"); filepath.Dir(pg) != want || filepath.Dir(initdb) != want {
		t.Fatalf("lookPostgres = %s, %s; want both in %s", pg, initdb, want)
	}
	if _, err := os.Stat(pg); errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}
