package ledger

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// refundSale is the sale the refund tests return goods of: T1:1, two A at 100 and one B at
// 50, 250 in all, paid by card.
func refundSale() Record {
	return withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 2, 100}, {"B", 1, 50}})), 1)
}

// refundOf returns a refund of T1:1 ("s1") as the event (terminal, seq), flow number flow,
// its lines on the sale's lines lines.
func refundOf(terminal string, seq, flow int64, items []item, lines ...int) Record {
	p := onLines(refundPayload("r"+wire.Key(terminal, seq), "s1", 1, false, wire.MethodCard, items), lines...)
	return withFlow(accepted(terminal, seq, day.Add(time.Duration(seq)*time.Minute), p), flow)
}

// TestRefundExceptions commits refunds against the sale they name, group by group, both ways
// of committing (staged and record by record), and wants every refund accepted, the refund
// exceptions listed (code by refund) and the same rows from both ways.
func TestRefundExceptions(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		groups [][]Record
		want   map[string]string // refund key → exception code
	}{
		{
			name: "refunded in full",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 2, 100}, {"B", 1, 50}}, 1, 2),
			}},
		},
		{
			name: "two partial refunds within the sale",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1),
			}, {
				refundOf("T1", 3, 3, []item{{"B", 1, 50}, {"A", 1, 100}}, 2, 1),
			}},
		},
		{
			name: "the second refund returns more of a line than was sold",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1),
			}, {
				refundOf("T1", 3, 3, []item{{"A", 2, 100}}, 1),
			}},
			want: map[string]string{"T1:3": CodeRefundExceedsSale},
		},
		{
			name:   "one refund pays back more than the sale took",
			groups: [][]Record{{refundSale()}, {refundOf("T1", 2, 2, []item{{"A", 1, 500}}, 1)}},
			want:   map[string]string{"T1:2": CodeRefundExceedsSale},
		},
		{
			name:   "one line paid back above what it took, within the sale's total",
			groups: [][]Record{{refundSale()}, {refundOf("T1", 2, 2, []item{{"B", 1, 150}}, 2)}},
			want:   map[string]string{"T1:2": CodeRefundExceedsSale},
		},
		{
			name: "two refunds of a line pay back more than it took in all",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 1, 150}}, 1),
			}, {
				refundOf("T1", 3, 3, []item{{"A", 1, 60}}, 1),
			}},
			want: map[string]string{"T1:3": CodeRefundExceedsSale},
		},
		{
			name: "refunds pay back more than the sale took in all",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 2, 100}}, 1),
				refundOf("T1", 3, 3, []item{{"B", 1, 60}}, 2),
			}},
			want: map[string]string{"T1:3": CodeRefundExceedsSale},
		},
		{
			name:   "a line the sale does not have",
			groups: [][]Record{{refundSale()}, {refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 3)}},
			want:   map[string]string{"T1:2": CodeRefundExceedsSale},
		},
		{
			name:   "another SKU than the sale's line",
			groups: [][]Record{{refundSale()}, {refundOf("T1", 2, 2, []item{{"B", 1, 50}}, 1)}},
			want:   map[string]string{"T1:2": CodeRefundExceedsSale},
		},
		{
			name: "unknown sale seq",
			groups: [][]Record{{refundSale()}, {withFlow(accepted("T1", 2, day,
				refundPayload("r2", "s1", 9, false, wire.MethodCard, []item{{"A", 1, 100}})), 2)}},
			want: map[string]string{"T1:2": CodeRefundSaleUnknown},
		},
		{
			name: "another sale id at the sale's seq",
			groups: [][]Record{{refundSale()}, {withFlow(accepted("T1", 2, day,
				refundPayload("r2", "s-other", 1, false, wire.MethodCard, []item{{"A", 1, 100}})), 2)}},
			want: map[string]string{"T1:2": CodeRefundSaleUnknown},
		},
		{
			name:   "the sale's seq on another terminal",
			groups: [][]Record{{refundSale()}, {refundOf("T2", 1, 2, []item{{"A", 1, 100}}, 1)}},
			want:   map[string]string{"T2:1": CodeRefundSaleUnknown},
		},
		{
			name: "the event at the sale's seq is a refused sale",
			groups: [][]Record{{refused(refundSale(), wire.AckRejected, true, "payload_invalid")}, {
				refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1),
			}},
			want: map[string]string{"T1:2": CodeRefundSaleUnknown},
		},
		{
			name: "a refund naming another sale id does not count against the sale",
			groups: [][]Record{{refundSale()}, {
				withFlow(accepted("T1", 2, day, refundPayload("r2", "s-other", 1, false, wire.MethodCard,
					[]item{{"A", 2, 100}})), 2),
				refundOf("T1", 3, 3, []item{{"A", 2, 100}}, 1),
			}},
			want: map[string]string{"T1:2": CodeRefundSaleUnknown},
		},
		{
			name: "the sale and its refunds in one group",
			groups: [][]Record{{
				refundSale(),
				refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1),
				refundOf("T1", 3, 3, []item{{"A", 1, 100}, {"B", 1, 50}}, 1, 2),
				refundOf("T1", 4, 4, []item{{"B", 1, 50}}, 2),
			}},
			want: map[string]string{"T1:4": CodeRefundExceedsSale},
		},
		{
			name: "a refund replayed is checked once",
			groups: [][]Record{{refundSale()}, {
				refundOf("T1", 2, 2, []item{{"A", 3, 100}}, 1),
			}, {
				refundOf("T1", 2, 2, []item{{"A", 3, 100}}, 1),
				refundOf("T1", 2, 2, []item{{"A", 3, 100}}, 1),
			}},
			want: map[string]string{"T1:2": CodeRefundExceedsSale},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rows [2]map[string][]string
			for i, staged := range []bool{true, false} {
				l := MustOpen(t, day)
				withStaged(staged, func() {
					for _, g := range tt.groups {
						for j, o := range MustCommit(t, l, g...) {
							if o.Err != nil || (g[j].Status == wire.AckAccepted && o.Status != wire.AckAccepted) {
								t.Fatalf("staged %v: %s: %+v", staged, wire.Key(g[j].Terminal, g[j].Seq), o)
							}
						}
					}
				})
				got, err := l.RefundExceptions(ctx, "", true)
				if err != nil {
					t.Fatal(err)
				}
				codes := map[string]string{}
				for _, x := range got {
					codes[wire.Key(x.Terminal, x.Seq)] = x.Code
					s := mustLookup(t, l, x.Terminal, x.Seq)
					if x.Detail == "" || x.BusinessDate != s.BusinessDate || x.BusinessDate != dayDate || x.At.IsZero() ||
						x.Resolved || s.Kind != wire.KindRefund || s.Status != wire.AckAccepted {
						t.Errorf("staged %v: exception %+v of event %+v", staged, x, s)
					}
					t.Logf("%s %s: %s", wire.Key(x.Terminal, x.Seq), x.Code, x.Detail)
				}
				want := tt.want
				if want == nil {
					want = map[string]string{}
				}
				if !reflect.DeepEqual(codes, want) {
					t.Errorf("staged %v: exceptions %v, want %v", staged, codes, want)
				}
				rows[i] = dump(t, l)
			}
			if !reflect.DeepEqual(rows[0], rows[1]) {
				t.Errorf("the two ways of committing wrote different rows:\nstaged %v\nrecord by record %v", rows[0], rows[1])
			}
		})
	}
}

// TestRefundExceptionDetail: the exception says what the ledger found, and takes the
// refund's business time and date, not the sale's.
func TestRefundExceptionDetail(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	next := day.AddDate(0, 0, 1)
	MustCommit(t, l, refundSale(),
		withFlow(accepted("T1", 2, day, refundPayload("r2", "s1", 1, false, wire.MethodCard, []item{{"A", 1, 100}})), 2),
		withFlow(accepted("T1", 3, next, refundPayload("r3", "s1", 1, false, wire.MethodCard, []item{{"A", 2, 100}})), 1))
	got, err := l.RefundExceptions(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.RefundException{{Terminal: "T1", Seq: 3, Code: CodeRefundExceedsSale,
		Detail: `line 1 of sale T1:1 ("A"): 3 returned in all, 2 sold`, At: next, BusinessDate: "2025-03-02"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("exceptions\n got %+v\nwant %+v", got, want)
	}
}

func TestResolveRefundException(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	next := day.AddDate(0, 0, 1)
	MustCommit(t, l, refundSale(),
		refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1),                                                           // covered
		refundOf("T1", 3, 3, []item{{"A", 1, 100}}, 2),                                                           // line 2 sold B
		withFlow(accepted("T1", 4, next, refundPayload("r4", "s9", 1, false, "card", []item{{"A", 1, 100}})), 1), // not s1
	)
	all, err := l.RefundExceptions(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Seq != 3 || all[0].Code != CodeRefundExceedsSale || all[1].Seq != 4 ||
		all[1].Code != CodeRefundSaleUnknown || all[1].BusinessDate != "2025-03-02" {
		t.Fatalf("open exceptions %+v", all)
	}
	if got, _ := l.RefundExceptions(ctx, "2025-03-02", false); !reflect.DeepEqual(got, all[1:]) {
		t.Errorf("exceptions of 2025-03-02: %+v", got)
	}
	if got, _ := l.RefundExceptions(ctx, "2025-02-28", true); got == nil || len(got) != 0 {
		t.Errorf("exceptions of a quiet day: %#v, want an empty list", got)
	}

	// A manager resolves the first: it leaves the open list, keeps its note, and a retry
	// changes nothing.
	resolvedAt := day.Add(3 * time.Hour)
	l.Now = func() time.Time { return resolvedAt }
	x, applied, err := l.ResolveRefundException(ctx, "T1", 3, "  the till's line 2 was keyed for line 1; the goods came back ")
	resolved := all[0]
	resolved.Resolved, resolved.ResolvedAt = true, resolvedAt
	resolved.Resolution = "the till's line 2 was keyed for line 1; the goods came back"
	if err != nil || !applied || !reflect.DeepEqual(x, resolved) {
		t.Fatalf("resolve: %+v applied %v err %v, want %+v", x, applied, err, resolved)
	}
	l.Now = func() time.Time { return resolvedAt.Add(time.Hour) }
	if x, applied, err := l.ResolveRefundException(ctx, "T1", 3, "another note"); err != nil || applied || !reflect.DeepEqual(x, resolved) {
		t.Errorf("resolving again: %+v applied %v err %v, want the first resolution unchanged", x, applied, err)
	}
	if got, _ := l.RefundExceptions(ctx, "", false); !reflect.DeepEqual(got, all[1:]) {
		t.Errorf("open exceptions after resolving one: %+v", got)
	}
	if got, _ := l.RefundExceptions(ctx, "", true); !reflect.DeepEqual(got, []client.RefundException{resolved, all[1]}) {
		t.Errorf("all exceptions: %+v", got)
	}
	for _, tc := range []struct {
		terminal string
		seq      int64
		note     string
		code     string
	}{
		{"T1", 2, "x", CodeRefundExceptionNotFound}, // a covered refund
		{"T9", 3, "x", CodeRefundExceptionNotFound},
		{"T1", 4, " ", CodeRefundExceptionResolutionRequired},
		{"T1", 4, strings.Repeat("é", wire.MaxTextLen/2+1), CodeRefundExceptionResolutionRequired}, // 2 bytes each
	} {
		if _, _, err := l.ResolveRefundException(ctx, tc.terminal, tc.seq, tc.note); perr.CodeOf(err) != tc.code {
			t.Errorf("resolve %s:%d %.10q: %v, want %s", tc.terminal, tc.seq, tc.note, err, tc.code)
		}
	}
	if got, _ := l.RefundExceptions(ctx, "", false); !reflect.DeepEqual(got, all[1:]) {
		t.Errorf("open exceptions after refused resolutions: %+v", got)
	}
}

// TestRefundCheckSeeks: the refund check seeks by key or index and never reads sale_lines
// (which has no index by event on purpose) nor scans a table.
func TestRefundCheckSeeks(t *testing.T) {
	l := MustOpen(t, day)
	for q, want := range map[string]string{
		selRefundSaleSeq:          "refunds USING INDEX sqlite_autoindex_refunds_1 (terminal=? AND seq=?)",
		selRefundsOfSale:          "refunds USING INDEX refunds_sale (terminal=? AND sale_seq=?)",
		selRefundedSales.shape(1): "refunds USING COVERING INDEX refunds_sale (terminal=? AND sale_seq=?)",
		delOpenRefundException:    "refund_exceptions USING INDEX sqlite_autoindex_refund_exceptions_1 (terminal=? AND seq=?)",
		selRefundedSale:           "SEARCH s USING PRIMARY KEY (business_date=? AND flow_no=?)",
		selSaleRefundLines:        "r USING INDEX refunds_sale (terminal=? AND sale_seq=?)",
	} {
		plan := queryPlan(t, l, q, "T1", 1, "s1", 2)
		all := strings.Join(plan, "; ")
		if !strings.Contains(all, want) || strings.Contains(q, "sale_lines") {
			t.Errorf("%s\nplan %q, want %q", q, all, want)
		}
		for _, step := range plan {
			// The keys given as a VALUES list are a scan of constant rows, each a seek.
			if (strings.HasPrefix(step, "SCAN") && step != "SCAN CONSTANT ROW") || strings.Contains(step, "TEMP B-TREE") {
				t.Errorf("%s\nplan: %s", q, all)
			}
		}
	}
}

// TestRefundBeforeItsSaleIsAccepted: a live sale refused by the gate (not final) that the
// terminal had meanwhile decided on its own, a refund of it accepted next, then the sale
// resent offline and accepted. The refund was flagged refund_sale_unknown when it came; once
// the sale is accepted it is covered, and the exception goes.
func TestRefundBeforeItsSaleIsAccepted(t *testing.T) {
	for _, staged := range []bool{true, false} {
		l := MustOpen(t, day)
		withStaged(staged, func() {
			sale := refundSale()
			MustCommit(t, l, refused(sale, wire.AckRejected, false, "out_of_stock"))
			MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1))
			if xs, _ := l.RefundExceptions(context.Background(), "", false); len(xs) != 1 || xs[0].Code != CodeRefundSaleUnknown {
				t.Fatalf("staged %v: before the sale, exceptions %+v, want one refund_sale_unknown", staged, xs)
			}
			if o := MustCommit(t, l, offline(sale)); o[0].Status != wire.AckAccepted {
				t.Fatalf("staged %v: sale %+v", staged, o[0])
			}
		})
		xs, err := l.RefundExceptions(context.Background(), "", true)
		if err != nil || len(xs) != 0 {
			t.Errorf("staged %v: once the sale is accepted, exceptions %+v (%v), want none", staged, xs, err)
		}
	}
}

// TestRefundsAcceptedOutOfSeqOrder: two refunds each returning the sale's whole line A (2
// sold): seq 2 refused live (not final), seq 3 accepted, then seq 2 resent offline and
// accepted. Held to the sale with every refund of a lower seq, whenever committed, seq 3
// returns 4 of the 2 sold.
func TestRefundsAcceptedOutOfSeqOrder(t *testing.T) {
	for _, staged := range []bool{true, false} {
		l := MustOpen(t, day)
		withStaged(staged, func() {
			MustCommit(t, l, refundSale())
			r2 := refundOf("T1", 2, 2, []item{{"A", 2, 100}}, 1)
			MustCommit(t, l, refused(r2, wire.AckRateLimited, false, "rate_limited"))
			MustCommit(t, l, refundOf("T1", 3, 3, []item{{"A", 2, 100}}, 1))
			if o := MustCommit(t, l, offline(r2)); o[0].Status != wire.AckAccepted {
				t.Fatalf("staged %v: refund %+v", staged, o[0])
			}
		})
		xs, err := l.RefundExceptions(context.Background(), "", false)
		if err != nil || len(xs) != 1 || wire.Key(xs[0].Terminal, xs[0].Seq) != "T1:3" || xs[0].Code != CodeRefundExceedsSale {
			t.Errorf("staged %v: exceptions %+v (%v), want T1:3 refund_exceeds_sale", staged, xs, err)
		}
	}
}

// TestResolvedExceptionStays: a manager's resolution is kept when the sale's refunds are
// held again (a later refund of the same sale).
func TestResolvedExceptionStays(t *testing.T) {
	l := MustOpen(t, day)
	ctx := context.Background()
	MustCommit(t, l, refundSale())
	MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 150}, {"B", 1, 150}}, 1, 2))
	if _, _, err := l.ResolveRefundException(ctx, "T1", 2, "a price agreed at the till"); err != nil {
		t.Fatal(err)
	}
	MustCommit(t, l, refundOf("T1", 3, 3, []item{{"A", 1, 100}}, 1))
	xs, err := l.RefundExceptions(ctx, "", true)
	if err != nil || len(xs) != 2 || !xs[0].Resolved || xs[0].Resolution != "a price agreed at the till" || xs[1].Resolved {
		t.Fatalf("exceptions %+v (%v): want T1:2 resolved as the manager left it, T1:3 open", xs, err)
	}
}

// TestResolvedUnknownReopensOnAnotherProblem: a refund flagged refund_sale_unknown (its sale
// was refused live) and resolved by a manager ("the sale was made offline") turns out to pay
// back more than the sale took once the sale is resent offline and accepted. The resolution
// answered another problem: the exception opens again as refund_exceeds_sale, the earlier
// resolution kept in its detail, also when a later refund of the sale holds it again.
func TestResolvedUnknownReopensOnAnotherProblem(t *testing.T) {
	ctx := context.Background()
	for _, staged := range []bool{true, false} {
		l := MustOpen(t, day)
		withStaged(staged, func() {
			sale := refundSale()
			MustCommit(t, l, refused(sale, wire.AckRejected, false, "out_of_stock"))
			MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 500}}, 1))
			if _, _, err := l.ResolveRefundException(ctx, "T1", 2, "the sale was made offline"); err != nil {
				t.Fatal(err)
			}
			if o := MustCommit(t, l, offline(sale)); o[0].Status != wire.AckAccepted {
				t.Fatalf("staged %v: sale %+v", staged, o[0])
			}
		})
		xs, err := l.RefundExceptions(ctx, "", false)
		if err != nil || len(xs) != 1 || xs[0].Code != CodeRefundExceedsSale ||
			!strings.Contains(xs[0].Detail, "earlier refund_sale_unknown, resolved: the sale was made offline") {
			t.Errorf("staged %v: open exceptions %+v (%v), want T1:2 refund_exceeds_sale with the earlier resolution", staged, xs, err)
		}
		// A later refund of the sale holds T1:2 again and finds the same problem: the earlier
		// resolution stays.
		withStaged(staged, func() {
			MustCommit(t, l, refundOf("T1", 3, 3, []item{{"B", 1, 50}}, 2)) // T1:2 paid back more than the sale took already
		})
		xs, err = l.RefundExceptions(ctx, "", false)
		if err != nil || len(xs) != 2 || xs[0].Seq != 2 || xs[0].Code != CodeRefundExceedsSale ||
			!strings.HasSuffix(xs[0].Detail, " (earlier refund_sale_unknown, resolved: the sale was made offline)") {
			t.Errorf("staged %v: after a later refund of the sale: %+v (%v), want T1:2 with the earlier resolution", staged, xs, err)
		}
	}
}

// TestSaleAcceptedAfterItsRefundAnew: the sale reaches the ledger only after its refund, with
// no record of it in between: its record did not commit (here a flow number another
// terminal holds) while ingest went on with the terminal's next event, and its resend is
// decided as a new record. Also a sale refused live and resent offline in one group after its
// refund. Once the sale is accepted, the refund is covered, both ways of committing.
func TestSaleAcceptedAfterItsRefundAnew(t *testing.T) {
	open := func(t *testing.T, l *Ledger) []client.RefundException {
		t.Helper()
		xs, err := l.RefundExceptions(context.Background(), "", false)
		if err != nil {
			t.Fatal(err)
		}
		return xs
	}
	for _, staged := range []bool{true, false} {
		l := MustOpen(t, day)
		withStaged(staged, func() {
			MustCommit(t, l, withFlow(accepted("T9", 1, day, salePayload("s9", []item{{"C", 1, 10}})), 1))
			o := MustCommit(t, l, refundSale() /* flow 1: T9's */, refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1))
			if o[0].Err == nil || o[1].Status != wire.AckAccepted {
				t.Fatalf("staged %v: outcomes %+v", staged, o)
			}
			if xs := open(t, l); len(xs) != 1 || xs[0].Code != CodeRefundSaleUnknown {
				t.Fatalf("staged %v: before the sale, exceptions %+v", staged, xs)
			}
			if o := MustCommit(t, l, withFlow(refundSale(), 3)); o[0].Status != wire.AckAccepted || o[0].Err != nil {
				t.Fatalf("staged %v: sale %+v", staged, o[0])
			}
		})
		if xs := open(t, l); len(xs) != 0 {
			t.Errorf("staged %v: once the sale is accepted anew, exceptions %+v, want none", staged, xs)
		}

		l = MustOpen(t, day)
		withStaged(staged, func() {
			MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1))
			sale := refundSale()
			if o := MustCommit(t, l, refused(sale, wire.AckRejected, false, "out_of_stock"), offline(sale)); o[1].Status != wire.AckAccepted {
				t.Fatalf("staged %v: %+v", staged, o)
			}
		})
		if xs := open(t, l); len(xs) != 0 {
			t.Errorf("staged %v: refused and accepted in one group after the refund, exceptions %+v, want none", staged, xs)
		}
	}
}

// TestDetailWithTheWordsOfASuffix: the problem's own text (a SKU) may hold the words an
// earlier resolution is written with; later refunds of the sale leave the exception as it
// is, and number no change of it.
func TestDetailWithTheWordsOfASuffix(t *testing.T) {
	ctx := context.Background()
	for _, staged := range []bool{true, false} {
		l := MustOpen(t, day)
		var details []string
		withStaged(staged, func() {
			sku := "X (earlier Y"
			MustCommit(t, l, withFlow(accepted("T1", 1, day, salePayload("s1",
				[]item{{sku, 1, 100}, {"B", 1, 50}, {"C", 1, 50}, {"D", 1, 50}})), 1))
			MustCommit(t, l, refundOf("T1", 2, 2, []item{{sku, 2, 100}}, 1)) // 2 returned, 1 sold
			for i, other := range []string{"B", "C", "D"} {
				MustCommit(t, l, refundOf("T1", int64(3+i), int64(3+i), []item{{other, 1, 50}}, 2+i))
				xs, err := l.RefundExceptions(ctx, "", true)
				if err != nil || len(xs) == 0 || xs[0].Seq != 2 {
					t.Fatalf("staged %v: exceptions %+v (%v), want T1:2's first", staged, xs, err)
				}
				details = append(details, xs[0].Detail)
			}
		})
		var changes int
		if err := l.db.R.QueryRow(`SELECT count(*) FROM exception_changes WHERE kind = 'refund' AND seq = 2`).Scan(&changes); err != nil {
			t.Fatal(err)
		}
		if details[0] != details[2] || changes != 1 {
			t.Errorf("staged %v: T1:2's detail went %q, %d changes numbered; want it as it was, 1", staged, details, changes)
		}
	}
}
