package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

// checkTillFlows compares, for each till (its data directory by terminal), the flow number
// of every sale and refund its outbox holds acknowledged with the ledger's (in storeDir),
// and checks that the ledger gives no flow number twice on a business date. It returns how
// many events it compared.
func checkTillFlows(t *testing.T, storeDir string, tills map[string]string) int {
	t.Helper()
	led := openRO(t, filepath.Join(storeDir, "ledger.db"))
	defer led.Close()
	ledger := map[string]int64{}
	rows, err := led.Query(`SELECT terminal, seq, flow_no FROM events WHERE kind IN ('sale', 'refund') AND status = 'accepted'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var term string
		var seq, flow int64
		if err := rows.Scan(&term, &seq, &flow); err != nil {
			t.Fatal(err)
		}
		ledger[fmt.Sprintf("%s:%d", term, seq)] = flow
	}
	rows.Close()
	n, bad := 0, 0
	for term, dir := range tills {
		db := openRO(t, filepath.Join(dir, "outbox.db"))
		rows, err := db.Query(`SELECT seq, flow_no FROM events WHERE kind IN ('sale', 'refund') AND state = 'acked'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var seq int64
			var flow sql.NullInt64
			if err := rows.Scan(&seq, &flow); err != nil {
				t.Fatal(err)
			}
			n++
			key := fmt.Sprintf("%s:%d", term, seq)
			if got, ok := ledger[key]; !ok || got != flow.Int64 {
				if bad++; bad < 5 {
					t.Errorf("%s: the till's flow number %d, the ledger's %d (held: %v)", key, flow.Int64, got, ok)
				}
			}
		}
		rows.Close()
		db.Close()
	}
	if bad > 0 || n == 0 {
		t.Errorf("%d of %d acknowledged sales and refunds differ in flow number between till and ledger", bad, n)
	}
	var flows, distinct int
	led.QueryRow(`SELECT count(*), count(DISTINCT business_date || ':' || flow_no) FROM
		(SELECT business_date, flow_no FROM sales UNION ALL SELECT business_date, flow_no FROM refunds)`).Scan(&flows, &distinct)
	if flows != distinct {
		t.Errorf("flow numbers: %d rows, %d distinct", flows, distinct)
	}
	return n
}

func openRO(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	return db
}
