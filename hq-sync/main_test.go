package main

import (
	"context"
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
