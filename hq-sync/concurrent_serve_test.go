package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/stack"
)

// simStore is a store's upload as the uploader sends it: signed batches, each sent until HQ
// answers with its receipt, under the same id and bytes.
type simStore struct {
	id      string
	secret  []byte
	batches []simBatch
	rows    int
}

type simBatch struct {
	id   string
	body []byte
	hash string // the body's hqwire.ContentHash
}

// newSimBatch is the batch of id with body, its content hash taken once, as a store's
// uploader signs a batch when it makes it and sends it as often as it must.
func newSimBatch(id string, body []byte) simBatch {
	return simBatch{id: id, body: body, hash: hqwire.ContentHash(body)}
}

// newSimStore builds a store's day: terminals × perTerminal sales in batches of batchRows,
// then a last batch with each terminal's day close and the store's declaration.
func newSimStore(id string, terminals, perTerminal, batchRows int) *simStore {
	s := &simStore{id: id, secret: []byte(id + "-secret-of-the-sim")}
	var rows, closes []hqwire.Row
	for t := 1; t <= terminals; t++ {
		term := fmt.Sprintf("T%d", t)
		trows := storetest.Sales(id, term, 1, perTerminal, storetest.D1, storetest.T0)
		rows = append(rows, trows...)
		closes = append(closes, storetest.DayClose(id, term, int64(perTerminal+1), storetest.D1, storetest.T0.Add(12*time.Hour), trows))
	}
	add := func(rows []hqwire.Row, days ...hqwire.StoreDay) {
		b := hqwire.Batch{V: hqwire.Version, Store: id, ID: fmt.Sprintf("%s-sim-%09d", id, len(s.batches)+1),
			SentAt: storetest.T0.Add(13 * time.Hour), Rows: rows, Days: days}
		body, err := json.Marshal(&b)
		if err != nil {
			panic(err)
		}
		s.batches = append(s.batches, newSimBatch(b.ID, body))
	}
	for i := 0; i < len(rows); i += batchRows {
		add(rows[i:min(i+batchRows, len(rows))])
	}
	add(closes, storetest.Day(storetest.D1, 1, storetest.T0.Add(14*time.Hour), rows))
	s.rows = len(rows) + len(closes)
	return s
}

// answer is what one send of a batch got.
type answer struct {
	status int
	rc     hqwire.Receipt
	err    error
}

// send sends batch b to the serve at url once.
func (s *simStore) send(ctx context.Context, url string, b simBatch) answer {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b.body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hqwire.HeaderStore, s.id)
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderIdemKey, b.id)
	req.Header.Set(hqwire.HeaderContentHash, b.hash)
	req.Header.Set(hqwire.HeaderSignature, hqwire.SignHash(s.secret, http.MethodPost, "/v1/batches", s.id, ts, b.id, b.hash))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, err: err}
	if err == nil && resp.StatusCode == http.StatusOK {
		if !hqwire.VerifyReceipt(s.secret, resp.Header.Get(hqwire.HeaderSignature), s.id, b.id, raw) {
			a.err = fmt.Errorf("a receipt not signed by HQ with store %s's secret", s.id)
		} else {
			a.err = json.Unmarshal(raw, &a.rc)
		}
	} else if err == nil {
		a.err = fmt.Errorf("%d %s", resp.StatusCode, raw)
	}
	return a
}

// TestConcurrentServes: three "hq-sync serve" processes share one PostgreSQL, and 200
// stores upload their day at once, each batch to one process and every fourth to two at
// the same moment; one process is SIGKILLed mid-run (a store whose request it held sends
// the batch again, to another process, as the uploader does) and started again later.
// Every batch is answered new at most once: where both copies of a batch sent twice were
// answered, once new and once as a duplicate. HQ ends with every row exactly once and
// every store's declaration, and the day reconciles exactly (hq-sync reconcile --stores).
func TestConcurrentServes(t *testing.T) {
	bins := binaries(t)
	st := stack.Run(t, stack.Options{Postgres: true})
	ctx := context.Background()
	dir := t.TempDir()
	const nStores = 200
	stores := make([]*simStore, nStores)
	var secrets []StoreSecret
	batches := 0
	for i := range stores {
		stores[i] = newSimStore(fmt.Sprintf("S%04d", i), 2, 120, 60)
		secrets = append(secrets, StoreSecret{Store: stores[i].id, Secret: string(stores[i].secret)})
		batches += len(stores[i].batches)
	}
	storesFile := filepath.Join(dir, "stores.json")
	js, _ := json.Marshal(secrets)
	if err := os.WriteFile(storesFile, js, 0o600); err != nil {
		t.Fatal(err)
	}
	var serves []*e2e.Serve
	for i := range 3 {
		h, err := e2e.StartServe(ctx, bins.HQSync, e2e.ServeOptions{Name: fmt.Sprintf("hq%d", i), DB: st.PostgresURL(),
			StoresFile: storesFile, Dir: dir, Extra: []string{"--db-conns", "4"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Kill() })
		serves = append(serves, h)
	}

	var done atomic.Int64 // batches answered
	killed := make(chan struct{})
	var fresh, dupBoth, refusedHQ, failed atomic.Int64
	var failMu sync.Mutex
	failures := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range stores {
		wg.Go(func() {
			for k, b := range s.batches {
				target := (i + k) % 3
				var answers []answer
				if k%4 == 3 { // the same batch to two processes at once
					pair := make([]answer, 2)
					var both sync.WaitGroup
					for j := range 2 {
						both.Go(func() { pair[j] = s.send(ctx, serves[(target+j)%3].BatchesURL(), b) })
					}
					both.Wait()
					for _, a := range pair {
						if a.status != http.StatusOK {
							failed.Add(1)
							failMu.Lock()
							failures[fmt.Sprint(a.status, " ", a.err)]++
							failMu.Unlock()
						}
					}
					if pair[0].status == http.StatusOK && pair[1].status == http.StatusOK {
						if pair[0].rc.Duplicate == pair[1].rc.Duplicate {
							t.Errorf("%s sent to two processes at once: duplicate %v and %v, want one of each",
								b.id, pair[0].rc.Duplicate, pair[1].rc.Duplicate)
						}
						dupBoth.Add(1)
					}
					answers = pair
				}
				for attempt := 0; !answered(answers); attempt++ {
					a := s.send(ctx, serves[(target+attempt)%3].BatchesURL(), b)
					if a.status >= 400 && a.status < 500 && a.status != http.StatusRequestTimeout {
						refusedHQ.Add(1)
						t.Errorf("%s refused: %v", b.id, a.err)
						return
					}
					answers = append(answers, a)
					if !answered(answers) {
						time.Sleep(time.Duration(20+attempt*20) * time.Millisecond)
					}
				}
				news := 0
				for _, a := range answers {
					if a.status == http.StatusOK && !a.rc.Duplicate {
						news++
					}
				}
				if news > 1 {
					t.Errorf("%s answered as new %d times", b.id, news)
				}
				fresh.Add(int64(news))
				if done.Add(1) == int64(batches/3) {
					close(killed)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-killed:
	case <-finished: // every store stopped early: the errors say why
		t.Fatalf("the stores stopped before a third of the batches were answered")
	}
	serves[1].Kill()
	t.Logf("%s SIGKILLed after %d of %d batches, %v in", serves[1].Name, batches/3, batches, time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	if err := serves[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		return
	}
	t.Logf("failed sends of the pairs: %v", failures)
	rows := 0
	for _, s := range stores {
		rows += s.rows
	}
	t.Logf("%d stores, %d batches, %d rows through 3 processes in %v (%.0f rows/s); %d answered new (the others "+
		"stored by a request whose answer was lost), %d batches sent twice at once answered both",
		nStores, batches, rows, took.Round(time.Millisecond), float64(rows)/took.Seconds(), fresh.Load(), dupBoth.Load())

	pool := openPool(t, st.PostgresURL())
	var n, keys, nBatches, nDays int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (store, terminal, seq)) FROM rows`).Scan(&n, &keys); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM batches), (SELECT count(*) FROM days)`).Scan(&nBatches, &nDays); err != nil {
		t.Fatal(err)
	}
	if n != rows || keys != rows || nBatches != batches || nDays != nStores {
		t.Fatalf("HQ holds %d rows of %d keys, %d batches and %d declarations; want %d rows once each, %d batches, %d declarations",
			n, keys, nBatches, nDays, rows, batches, nStores)
	}
	code, out, errs := runCmd(ctx, "reconcile", "--db", st.PostgresURL(), "--stores", storesFile, "--date", storetest.D1,
		"--workers", "2")
	if code != 0 {
		t.Fatalf("reconcile: exit %d\n%s\n%s", code, out, errs)
	}
}

// answered reports whether one of answers is HQ's receipt.
func answered(answers []answer) bool {
	for _, a := range answers {
		if a.status == http.StatusOK {
			return true
		}
	}
	return false
}
