package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

// The tests of this package that run the store-server in-process for other jobs than
// enrolment publish as terminals they make up; the binary never runs without a list
// (TestStartNeedsEnrolment), and the tests of enrolment give one.
func init() { openEnrolment = true }

// runStoreServer runs the store-server binary to its end (30 s at most) and returns its
// exit code and standard error.
func runStoreServer(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "POSGATE_API_TOKEN="+biToken)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), stderr.String()
	}
	t.Fatalf("store-server %v: %v\n%s", args, err, stderr.String())
	return 0, ""
}

// TestStartNeedsEnrolment: the store-server binary given no enrolled-terminal list — no
// --terminals, and no --mqtt-users on its embedded broker (anonymous), an external broker
// (whose accounts the store cannot read) — refuses to start with terminals_required, naming
// what to give; an accounts file with no account is refused as it is read. Given an empty terminals file it
// starts and takes no terminal: a made-up terminal's sale, status and backlog get no ack,
// no ledger row, no seq gap, no presence entry, no metric label, and are counted
// terminal_unknown; the till enrolled a moment before its first message is taken at once.
func TestStartNeedsEnrolment(t *testing.T) {
	t.Parallel()
	bins := binaries(t)
	dir := t.TempDir()
	noAccounts := filepath.Join(dir, "users.json")
	if err := os.WriteFile(noAccounts, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func(name string) []string {
		return []string{"--store", biStoreID, "--data-dir", filepath.Join(dir, name), "--tz", biTZ,
			"--redis-addr", "127.0.0.1:1", "--api-listen", "127.0.0.1:0", "--mqtt-listen", "127.0.0.1:0"}
	}
	for _, c := range []struct {
		name string
		args []string
		why  string
	}{
		{"anonymous embedded broker", nil, "neither --terminals nor --mqtt-users"},
		{"external broker", []string{"--mqtt-url", "tcp://127.0.0.1:1"}, "external broker"},
		{"external broker and an accounts file", []string{"--mqtt-url", "tcp://127.0.0.1:1", "--mqtt-users", noAccounts}, "external broker"},
	} {
		code, stderr := runStoreServer(t, bins.StoreServer, append(base(strings.ReplaceAll(c.name, " ", "-")), c.args...)...)
		if code == 0 || !strings.Contains(stderr, CodeTerminalsRequired) || !strings.Contains(stderr, c.why) ||
			!strings.Contains(stderr, "--terminals") || !strings.Contains(stderr, "--mqtt-users") {
			t.Errorf("%s: exit %d, stderr %q: want a refusal %s naming --terminals and --mqtt-users", c.name, code, stderr, CodeTerminalsRequired)
		}
	}
	// An accounts file with no account is refused as it is read.
	if code, stderr := runStoreServer(t, bins.StoreServer, append(base("no-account"), "--mqtt-users", noAccounts)...); code == 0 ||
		!strings.Contains(stderr, "no accounts in it") {
		t.Errorf("an accounts file with no account: exit %d, stderr %q", code, stderr)
	}

	// An empty terminals file: the store starts and takes no terminal.
	st := stack.Run(t, stack.Options{Redis: true})
	ctx := context.Background()
	terminals := filepath.Join(dir, "terminals")
	if err := os.WriteFile(terminals, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "store"), 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := e2e.StartStore(ctx, bins.StoreServer, e2e.StoreOptions{Store: biStoreID, DataDir: filepath.Join(dir, "store"),
		TZ: biTZ, RedisAddr: st.Redis[0].Addr(), Token: biToken, Extra: []string{"--terminals", terminals}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Kill() })
	m := srv.Manager()
	if _, err := m.ImportCatalogCSV(ctx, strings.NewReader(biCatalogCSV)); err != nil {
		t.Fatal(err)
	}
	bus := biConnect(t, srv.Broker)
	loc, _ := time.LoadLocation(biTZ)
	at := time.Now().In(loc).Add(-time.Minute)
	sale := func(terminal string, seq int64) []byte {
		env := wire.NewEnvelope(wire.KindSale, biStoreID, terminal, seq, at,
			biMarshal(t, biSale(terminal+"-sale", []biLine{{"A1", 1}}, nil, 0)))
		env.Offline = true
		return biBatch(terminal, biMarshal(t, env))
	}
	const madeUp = "T_MADE_UP_7"
	bus.publish(t, madeUp, sale(madeUp, 9)) // a gap of eight it would open
	for _, topic := range []string{wire.StatusTopic(biStoreID, madeUp), wire.BacklogTopic(biStoreID, madeUp)} {
		if tok := bus.c.Publish(topic, 1, true, []byte(`{"v":1,"online":true}`)); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	if d, ok := bus.next(madeUp, 1500*time.Millisecond); ok {
		t.Errorf("a made-up terminal was answered: %s", d.raw)
	}
	mode, err := m.Mode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tot, err := m.Totals(ctx, at.Format(wire.BusinessDate))
	if err != nil {
		t.Fatal(err)
	}
	terms, err := m.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mode.Stats.Messages != 0 || mode.Stats.SeqGaps != 0 || len(tot.Terminals) != 0 || len(terms.Terminals) != 0 {
		t.Errorf("the made-up terminal got in: messages %d, seq gaps %d, totals %+v, terminals %+v",
			mode.Stats.Messages, mode.Stats.SeqGaps, tot.Terminals, terms.Terminals)
	}
	metrics := metricsOf(t, srv)
	if !strings.Contains(metrics, `posgate_store_refusals_total{code="terminal_unknown"}`) ||
		strings.Contains(metrics, `posgate_store_refusals_total{code="terminal_unknown"} 0`) || strings.Contains(metrics, madeUp) {
		t.Errorf("terminal_unknown not counted, or the made-up id is a label:\n%s", strings.Join(grepLines(metrics, "terminal_unknown"), "\n"))
	}
	if log, _ := os.ReadFile(srv.Log); !strings.Contains(string(log), "terminal_unknown") {
		t.Errorf("terminal_unknown not logged:\n%s", log)
	}

	// The operator enrols T01: its first message is taken (the file is looked at again for
	// a terminal not on it, at most every 50 ms).
	if err := os.WriteFile(terminals, []byte("# the till by the door\nT01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	bus.publish(t, "T01", sale("T01", 1))
	d, ok := bus.next("T01", 10*time.Second)
	if !ok || d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != wire.AckAccepted {
		t.Fatalf("the till enrolled: acks %+v (%v, answered %v)", d.acks, d.err, ok)
	}
	if terms, err := m.Terminals(ctx); err != nil || len(terms.Terminals) != 1 || terms.Terminals[0].Terminal != "T01" {
		t.Errorf("terminals %+v (%v): want T01 alone", terms, err)
	}
}
