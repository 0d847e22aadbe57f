package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/hqwire"
)

// The demo's tokens and the store's secret: printed with the addresses, for a person to
// open the pages with.
const (
	managerToken = "demo-manager-token"
	viewerToken  = "demo-hq-viewer-token"
	storeSecret  = "demo-S001-signing-secret"
)

// startHQ starts hq-sync serve on a SQLite database with its page, and the store's
// uploader sending the ledger to it.
func (d *demo) startHQ(ctx context.Context) error {
	hqDir := filepath.Join(d.dir, "hq")
	if err := os.MkdirAll(hqDir, 0o700); err != nil {
		return err
	}
	var err error
	say("starting hq-sync serve at HQ (SQLite) and hq-sync upload at the store")
	d.hq, err = e2e.StartServe(ctx, d.bins.HQSync, e2e.ServeOptions{DB: filepath.Join(hqDir, "hq.db"),
		Stores: map[string]string{"S001": storeSecret}, Dir: hqDir, ViewerToken: viewerToken})
	if err != nil {
		return err
	}
	d.uploader, err = e2e.StartUploader(ctx, d.bins.HQSync, e2e.UploaderOptions{Store: "S001",
		DataDir: d.store.Opts.DataDir, HQURL: d.hq.BatchesURL(), Secret: storeSecret, TZ: d.zone})
	return err
}

func (d *demo) printAddresses() {
	fmt.Println()
	fmt.Printf("  store dashboard  http://%s/#token=%s   (manager token %s)\n", d.store.API, managerToken, managerToken)
	fmt.Printf("  HQ page          %s   (viewer token %s)\n", d.hq.PageURL(), viewerToken)
	fmt.Println()
}

// closeDay closes date at every till, as each cashier does at the end of the day; the close
// travels to the store like any event.
func (d *demo) closeDay(ctx context.Context, date string) bool {
	ok := true
	for _, term := range terminals {
		c := d.cashiers[term]
		st, body, err := c.Call("POST", "/v1/day-close", fmt.Sprintf(`{"business_date":%q}`, date))
		if err != nil || st != 200 {
			say("FAIL %s's day close of %s: %d %s %v", term, date, st, body, err)
			ok = false
			continue
		}
	}
	say("every till closed %s", date)
	return ok
}

// reconcile waits until HQ holds the store's declaration of date with every transaction of
// the ledger's, then runs hq-sync reconcile on it and checks that the day reconciles
// transaction by transaction, with the store's oversells of the day listed as exceptions.
func (d *demo) reconcile(ctx context.Context, date string) bool {
	fmt.Println()
	start := time.Now()
	txns, err := e2e.WaitDeclared(ctx, d.store, d.hq, date)
	if err != nil {
		fmt.Printf("FAIL HQ never held the store's declaration of %s with every transaction of the ledger's: %v\n", date, err)
		return false
	}
	took := time.Since(start)
	say("HQ holds the store's declaration of %s (%d transactions), %v after the tills' close", date, txns,
		took.Round(100*time.Millisecond))
	db := filepath.Join(d.dir, "hq", "hq.db")
	args := []string{"reconcile", "--db", db, "--date", date, "--stores", d.hq.StoresFile}
	table, _ := exec.CommandContext(ctx, d.bins.HQSync, args...).Output()
	printHead(string(table), 24)
	// Outside the working directory, which the demo removes: for a person to open.
	html := filepath.Join(os.TempDir(), "posgate-demo-reconcile-"+date+".html")
	out, err := exec.CommandContext(ctx, d.bins.HQSync, append(args, "--format", "json", "--html", html)...).Output()
	var rep reconcile.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		fmt.Printf("FAIL hq-sync reconcile: %v %v\n%s\n", err, jerr, out)
		return false
	}
	return d.checkReport(ctx, rep, date, txns, html)
}

// checkReport checks the reconcile's report: it reconciles, it covers every transaction of
// the ledger's at HQ and in the declaration, every till's day close, and it lists the
// store's oversells of the day as exceptions; and that HQ holds the store's flow exceptions
// as its ledger does.
func (d *demo) checkReport(ctx context.Context, rep reconcile.Report, date string, txns int, html string) bool {
	r := e2e.Report{OK: true}
	add := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark, r.OK = "FAIL", false
		}
		r.Lines = append(r.Lines, mark+" "+fmt.Sprintf(format, args...))
	}
	add(rep.OK(), "HQ reconcile of %s: %s", date, rep.Summary())
	add(rep.LedgerTxns == txns && rep.HQTxns == txns, "transactions: %d in the ledger = %d declared = %d at HQ",
		txns, rep.LedgerTxns, rep.HQTxns)
	add(rep.DayCloses == len(terminals), "day closes at HQ: %d of %d tills", rep.DayCloses, len(terminals))
	over, err := d.store.Manager().Oversells(ctx, date, true)
	if err != nil {
		add(false, "store oversells: %v", err)
	} else {
		n := 0
		for _, x := range rep.Exceptions {
			if x.Kind == hqwire.ExceptionOversell {
				n++
			}
		}
		add(n == len(over.Oversells), "offline oversells listed as exceptions, not differences: %d at HQ, %d in the store's ledger",
			n, len(over.Oversells))
	}
	e2e.VerifyHQ(ctx, d.store, d.hq, &r) // the store's rows, exceptions, flow exceptions and stock moves at HQ as in its ledger
	if st, err := os.Stat(html); err == nil && st.Size() > 0 {
		add(true, "reconcile --html wrote %s (%d bytes)", html, st.Size())
	} else {
		add(false, "reconcile --html wrote nothing: %v", err)
	}
	fmt.Print(strings.Join(r.Lines, "\n") + "\n")
	return r.OK
}

// printHead prints the first n lines of text, and how many more there are.
func printHead(text string, n int) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("… %d more lines (the whole report: hq-sync reconcile, or the HTML file below)",
			len(lines)-n))
	}
	fmt.Println(strings.Join(lines, "\n"))
}

// hold keeps everything running until ctx ends (Ctrl-C), with T01 selling a sale every few
// seconds on the new business day, so that the dashboard's charts move.
func (d *demo) hold(ctx context.Context) {
	d.printAddresses()
	say("holding: everything keeps running, T01 sells now and then; Ctrl-C ends the demo")
	sell(ctx, d.cashiers["T01"], 0, 3*time.Second)
	fmt.Println()
	say("stopping")
}
