package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadFlagsAreUsageErrors: a flag a command does not know, or a POSGATE_* value its flag
// refuses, exits 2 (usage) with the reason on stderr, never 1, which reconcile answers for a
// day that does not reconcile.
func TestBadFlagsAreUsageErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		env  [2]string
		args []string
		want string
	}{
		{"unknown flag", [2]string{}, []string{"reconcile", "--nope"}, "flag provided but not defined"},
		{"bad duration", [2]string{"POSGATE_HQ_DROP_PARTS_AFTER", "soon"}, []string{"serve"}, "POSGATE_HQ_DROP_PARTS_AFTER"},
		{"bad number", [2]string{}, []string{"upload", "--batch-rows", "many"}, "batch-rows"},
		{"unknown command", [2]string{}, []string{"sync"}, `unknown command "sync"`},
		{"retain on SQLite", [2]string{}, []string{"serve", "--stores", "x.json", "--db", "hq.db", "--retain", "400d"}, "needs PostgreSQL"},
		{"retain unreadable", [2]string{}, []string{"serve", "--stores", "x.json", "--db", "postgres://h/db", "--retain", "a year"}, "--retain"},
		{"retain too short", [2]string{}, []string{"serve", "--stores", "x.json", "--db", "postgres://h/db", "--retain", "1d"}, "at least 2 days"},
		{"reconcile workers", [2]string{}, []string{"reconcile", "--workers", "0"}, "--workers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			if code, _, errs := runCmd(ctx, c.args...); code != exitUsage || !strings.Contains(errs, c.want) {
				t.Errorf("hq-sync %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errs, exitUsage, c.want)
			}
		})
	}
}

// TestVersion: --version prints the build (version, commit, Go and SQLite) and exits 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		code, out, errs := runCmd(context.Background(), arg)
		if code != exitOK || !strings.HasPrefix(out, "hq-sync ") || !strings.Contains(out, "SQLite 3.") || errs != "" {
			t.Errorf("hq-sync %s: exit %d, stdout %q, stderr %q", arg, code, out, errs)
		}
	}
}

// TestServeViewerToken: a viewer token comes from its file or the environment, never an
// argument, and one shorter than 16 bytes is a usage error whichever it came from.
func TestServeViewerToken(t *testing.T) {
	dir := t.TempDir()
	stores := filepath.Join(dir, "stores.json")
	if err := os.WriteFile(stores, []byte(`[{"store":"S1","secret":"s1-secret-of-16-bytes"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "viewer")
	if err := os.WriteFile(short, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCmd(context.Background(), "serve", "--stores", stores, "--viewer-token-file", short); code != 2 ||
		!strings.Contains(errs, "--viewer-token-file "+short+": 9 bytes, want at least 16") {
		t.Errorf("serve --viewer-token-file (too short): exit %d: %s", code, errs)
	}
	if code, _, errs := runCmd(context.Background(), "serve", "--stores", stores, "--viewer-token", "a-viewer-token-of-the-test"); code != 2 ||
		!strings.Contains(errs, "not defined: -viewer-token") || strings.Contains(errs, "a-viewer-token-of-the-test") {
		t.Errorf("serve --viewer-token as an argument: exit %d: %s", code, errs)
	}
	t.Setenv("POSGATE_HQ_VIEWER_TOKEN", "short")
	if code, _, errs := runCmd(context.Background(), "serve", "--stores", stores); code != 2 ||
		!strings.Contains(errs, "POSGATE_HQ_VIEWER_TOKEN: 5 bytes") || strings.Contains(errs, "short\n") {
		t.Errorf("serve with POSGATE_HQ_VIEWER_TOKEN=short: exit %d: %s", code, errs)
	}
}

// TestDBPasswordNotAnArgument: a PostgreSQL URL with a password is refused as the --db flag
// (ps would show it), without echoing the password; the same URL by POSGATE_HQ_DB, or a
// URL without a password as the flag, is taken.
func TestDBPasswordNotAnArgument(t *testing.T) {
	stores := filepath.Join(t.TempDir(), "stores.json")
	if err := os.WriteFile(stores, []byte(`[{"store":"S1","secret":"s1-secret-of-16-bytes"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	const withPassword = "postgres://hq:pw-of-the-test@127.0.0.1:1/hq"
	for _, args := range [][]string{
		{"serve", "--stores", stores, "--db", withPassword},
		{"reconcile", "--db", withPassword, "--date", "2026-12-01"},
	} {
		code, _, errs := runCmd(context.Background(), args...)
		if code != exitUsage || !strings.Contains(errs, "POSGATE_HQ_DB") || strings.Contains(errs, "pw-of-the-test") {
			t.Errorf("hq-sync %s --db <URL with a password>: exit %d, stderr %q; want exit %d naming POSGATE_HQ_DB, not the password", args[0], code, errs, exitUsage)
		}
	}
	if err := newServe(io.Discard).ParseFlags([]string{"--stores", stores, "--db", "postgres://hq@127.0.0.1:1/hq"}); err != nil {
		t.Errorf("serve --db <URL without a password>: %v", err)
	}
	t.Setenv("POSGATE_HQ_DB", withPassword)
	if err := newServe(io.Discard).ParseFlags([]string{"--stores", stores}); err != nil {
		t.Errorf("serve with POSGATE_HQ_DB holding a password: %v", err)
	}
	if err := newReconcile(io.Discard, io.Discard).ParseFlags([]string{"--date", "2026-12-01"}); err != nil {
		t.Errorf("reconcile with POSGATE_HQ_DB holding a password: %v", err)
	}
}
