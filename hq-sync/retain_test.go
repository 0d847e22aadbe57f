package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// TestServeKeepsDays: serve's day keeping on PostgreSQL makes the partitions of the days
// ahead, and with --retain drops an old day once "hq-sync reconcile" of every store has
// covered it: not before, and never a younger day.
func TestServeKeepsDays(t *testing.T) {
	ctx := context.Background()
	st := stack.Run(t, stack.Options{Postgres: true})
	url := st.PostgresURL()
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	today := time.Now().UTC()
	day := func(d int) string { return today.AddDate(0, 0, d).Format(wire.BusinessDate) }
	old, young := day(-20), day(-3)
	for i, d := range []string{old, young} {
		rows := storetest.Sales("S1", "T1", int64(1+100*i), 4, d, storetest.T0)
		b, h := storetest.NewBatch("S1", "b-"+d, rows, storetest.Day(d, 1, storetest.T0, rows))
		storetest.MustPut(t, s, b, h, time.Now())
	}
	var logs bytes.Buffer
	keep := func() { keepDaysOnce(ctx, s, 2, 10*24*time.Hour, slog.New(slog.NewTextHandler(&logs, nil))) }
	first := time.Now().UTC() // the first pass's day: the partitions go from the day before it
	keep()
	stores := func(d string) []string {
		got, err := s.DateStores(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := stores(old); !slices.Equal(got, []string{"S1"}) {
		t.Fatalf("the old day, not reconciled yet, was dropped: stores %v", got)
	}
	// Reconcile both days (the old one does not reconcile: no day close; it counts as covered).
	for _, d := range []string{old, young} {
		if code, _, errs := runCmd(ctx, "reconcile", "--db", url, "--date", d); code != exitDiffers {
			t.Fatalf("reconcile %s: exit %d: %s", d, code, errs)
		}
	}
	keep()
	last := time.Now().UTC() // the last pass's day: the partitions go to two days after it
	if got := stores(old); len(got) != 0 {
		t.Fatalf("the old day, reconciled, was kept: stores %v; serve's log:\n%s", got, logs.String())
	}
	if got := stores(young); !slices.Equal(got, []string{"S1"}) {
		t.Fatalf("the young day was dropped: stores %v", got)
	}
	// The days ahead have their partitions: a batch of the day after tomorrow makes none.
	c, err := s.DateStores(ctx, day(2))
	if err != nil || len(c) != 0 {
		t.Fatal(c, err)
	}
	var n int
	pool := openPool(t, url)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'rows'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The young day, and yesterday to the day after tomorrow (UTC): a day more if the passes
	// ran on either side of midnight.
	days := int(last.Truncate(24*time.Hour).Sub(first.Truncate(24*time.Hour)) / (24 * time.Hour))
	if want := 5 + days; n != want {
		t.Fatalf("%d partitions of rows, want %d (the young day and yesterday to today+2)", n, want)
	}
}
