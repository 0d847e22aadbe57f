package gate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
)

// Kind is the kind of an Op.
type Kind int

// The kinds of Op.
const (
	OpScan   Kind = iota + 1 // a scanned line: live, limits and a stock check, nothing decremented
	OpSale                   // a completed sale: stock, counters, flow number
	OpRefund                 // a refund: counters, flow number, restock if asked
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case OpScan:
		return "scan"
	case OpSale:
		return "sale"
	case OpRefund:
		return "refund"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// action returns the limiter action of an op kind.
func (k Kind) action() string {
	switch k {
	case OpScan:
		return store.ActionScan
	case OpSale:
		return store.ActionPay
	}
	return store.ActionRefund
}

// Op is one event for the gate to decide. Its idempotency key is Terminal:Seq and Hash is
// its content hash (wire.Hash).
type Op struct {
	Kind         Kind
	Terminal     string
	Seq          int64
	Hash         string
	Live         bool   // a live attempt: limits and stock checks apply; offline events are never refused
	BusinessDate string // YYYY-MM-DD: the day of the counters and of the flow number
	// Lines: scan: one line; sale: every line; refund: the refunded lines. A SKU on several
	// lines counts with the sum of their quantities.
	Lines []store.Line
	Total money.Fen // sale total or refund amount
	// ByMethod: sale: fen per payment method, cash net of change; refund: {method: amount}.
	// It sums to Total. Scans ignore Total and ByMethod.
	ByMethod map[string]money.Fen
	Restock  bool // refund: put the lines back in stock
}

// Verdict is the gate's decision on one Op.
type Verdict struct {
	// Status: wire.AckAccepted; wire.AckDuplicate (same key and hash seen before: FlowNo and
	// Oversold are the original ones); wire.AckConflict (same key, other hash: the original
	// stands); wire.AckRejected (live only: out of stock); wire.AckRateLimited (live only).
	Status     wire.AckStatus
	Code       string        // "out_of_stock", "rate_limited", "idempotency_conflict"; "" otherwise
	Message    string        // readable, e.g. `not enough "MILK" in stock (2 left, 3 asked)`
	FlowNo     int64         // sale and refund: the store flow number of BusinessDate
	Oversold   bool          // an offline sale took some SKU below zero (and was accepted)
	RetryAfter time.Duration // rate limited: when the refusing layer has room again, in whole ms ≥ 1ms
	Layer      string        // rate limited: the refusing layer, "store", "terminal" or the action
	// Remaining is the capacity left in the store, terminal and action windows after this
	// call; set for live ops that reached the limiter (not for duplicates and conflicts).
	Remaining [3]int64
}

// Verdict codes.
const (
	CodeOutOfStock  = "out_of_stock"
	CodeRateLimited = "rate_limited"
	CodeConflict    = "idempotency_conflict"
)

// execChunk bounds the ops of one script call. Redis runs a call atomically and serves no
// other client meanwhile: 250 live sales take a few milliseconds.
const execChunk = 250

// Exec decides ops in order and returns one verdict per op: an op sees the effects of the
// ops before it. The ops go to Redis in one script call (lua/exec.lua) per 250, which reads
// what they share once (limits, promo, time, each window's count) and runs them atomically;
// a script Redis lost (failover, restart) is sent again in full, which is safe because a
// call that failed did nothing. On an error (a *perr.Error) the calls before the failing
// one have been applied; running their ops again is safe (they are then duplicates).
func (g *Gate) Exec(ctx context.Context, ops []Op) ([]Verdict, error) {
	for i := range ops {
		if err := checkOp(&ops[i]); err != nil {
			return nil, err
		}
	}
	if g.stale.Load() {
		return nil, g.staleErr()
	}
	verdicts := make([]Verdict, 0, len(ops))
	for from := 0; from < len(ops); from += execChunk {
		chunk := ops[from:min(len(ops), from+execChunk)]
		keys, args := g.execCall(chunk)
		res, err := execScript.Run(ctx, g.rdb, keys, args...).Slice()
		if err != nil {
			return nil, g.fail(fmt.Sprintf("exec ops %d-%d", from, from+len(chunk)-1), err)
		}
		if len(res) != len(chunk) {
			return nil, perr.New(perr.Internal, CodeRedis, "gate script answered %d verdicts for %d ops", len(res), len(chunk))
		}
		for j, r := range res {
			arr, _ := r.([]any)
			v, err := g.verdict(arr, &chunk[j])
			if err != nil {
				return nil, err
			}
			verdicts = append(verdicts, v)
		}
	}
	if g.stale.Load() { // the call reached another server than the projection's
		return nil, g.staleErr()
	}
	return verdicts, nil
}

func (g *Gate) staleErr() error {
	return perr.New(perr.Unavailable, CodeUnavailable, "gate %s: the Redis server changed; the projection is rebuilt first", g.store)
}

// Allow checks n (1 to MaxAllowN) events of an action (store.ActionScan, ActionPay or
// ActionRefund) of a terminal against the store, terminal and action windows and, only
// if all three have room, records them in all three, in one script call. The verdict is
// AckAccepted, or AckRateLimited with RetryAfter and Layer.
func (g *Gate) Allow(ctx context.Context, terminal, action string, n int64) (Verdict, error) {
	switch {
	case !wire.ValidID(terminal):
		return Verdict{}, perr.New(perr.Invalid, CodeInvalid, "terminal id %q is not valid", terminal)
	case store.DefaultLimits.Action(action) == 0:
		return Verdict{}, perr.New(perr.Invalid, CodeInvalid, "action %q is not scan, pay or refund", action)
	case n < 1 || n > MaxAllowN:
		return Verdict{}, perr.New(perr.Invalid, CodeInvalid, "allow takes 1 to %d events, got %d", MaxAllowN, n)
	}
	d := store.DefaultLimits
	res, err := allowScript.Run(ctx, g.rdb, g.limiterKeys(terminal, action),
		d.WindowMs, d.Store, d.Terminal, d.Action(action), action, n).Slice()
	if err != nil {
		return Verdict{}, g.fail("allow", err)
	}
	return g.verdict(res, nil)
}

func (g *Gate) limiterKeys(terminal, action string) []string {
	return []string{g.k.rlStore(), g.k.rlTerminal(terminal), g.k.rlAction(terminal, action),
		g.k.rlSeq(), g.k.limits(), g.k.promo()}
}

// execCall builds the keys and arguments of one exec.lua call for ops, already checked
// (see lua/exec.lua for the layout).
func (g *Gate) execCall(ops []Op) (keys []string, args []any) {
	d := store.DefaultLimits
	epoch := g.epoch.Load()
	keys = make([]string, 0, 6+6*len(ops))
	keys = append(keys, g.k.stock(), g.k.rlStore(), g.k.rlSeq(), g.k.limits(), g.k.promo(), g.k.marker())
	args = make([]any, 0, 9+20*len(ops))
	args = append(args, g.o.IdemTTL.Milliseconds(), d.WindowMs, d.Store, d.Terminal, d.Scan, d.Pay, d.Refund, len(ops), epoch)
	for i := range ops {
		op := &ops[i]
		t := op.Terminal
		live := "0"
		if op.Live {
			live = "1"
		}
		args = append(args, op.Kind.String(), len(keys)+1, op.Hash, live) // Lua counts keys from 1
		keys = append(keys, g.k.idem(epoch, t, op.Seq), g.k.rlTerminal(t), g.k.rlAction(t, op.Kind.action()))
		if op.Kind == OpScan {
			args = append(args, op.Lines[0].SKU, op.Lines[0].Qty)
			continue
		}
		keys = append(keys, g.k.counters(op.BusinessDate, t), g.k.counterIndex(op.BusinessDate), g.k.flow(op.BusinessDate))
		args = append(args, t)
		if op.Kind == OpRefund {
			restock := "0"
			if op.Restock {
				restock = "1"
			}
			args = append(args, restock)
		}
		args = appendLines(args, op.Lines)
		args = append(args, strconv.FormatInt(int64(op.Total), 10), 0)
		n := len(args) - 1
		for _, m := range []string{wire.MethodCash, wire.MethodCard, wire.MethodQR} {
			if f := op.ByMethod[m]; f != 0 {
				args = append(args, m, strconv.FormatInt(int64(f), 10))
				args[n] = args[n].(int) + 1
			}
		}
	}
	return keys, args
}

// appendLines appends the line count and (sku, qty) pairs, one per SKU in the order of
// first appearance, quantities summed.
func appendLines(args []any, lines []store.Line) []any {
	idx := make(map[string]int, len(lines))
	var skus []string
	var qty []int64
	for _, l := range lines {
		if i, ok := idx[l.SKU]; ok {
			qty[i] += l.Qty
			continue
		}
		idx[l.SKU] = len(skus)
		skus = append(skus, l.SKU)
		qty = append(qty, l.Qty)
	}
	args = append(args, len(skus))
	for i, s := range skus {
		args = append(args, s, qty[i])
	}
	return args
}

// checkOp checks the rules the scripts rely on.
func checkOp(op *Op) error {
	bad := func(format string, args ...any) error {
		return perr.New(perr.Invalid, CodeInvalid, "%s %s:%d: %s", op.Kind, op.Terminal, op.Seq, fmt.Sprintf(format, args...))
	}
	switch {
	case op.Kind != OpScan && op.Kind != OpSale && op.Kind != OpRefund:
		return bad("unknown op kind")
	case !wire.ValidID(op.Terminal):
		return bad("terminal id is not valid")
	case op.Seq <= 0:
		return bad("seq must be positive")
	case op.Hash == "" || len(op.Hash) > wire.MaxTextLen || strings.ContainsRune(op.Hash, '|'):
		return bad("content hash must be 1 to %d bytes without '|'", wire.MaxTextLen)
	case op.Kind == OpScan && len(op.Lines) != 1:
		return bad("a scan has exactly one line, got %d", len(op.Lines))
	case len(op.Lines) == 0 && op.Kind != OpScan:
		return bad("no lines")
	case len(op.Lines) > wire.MaxLines:
		return bad("more than %d lines", wire.MaxLines)
	}
	for i, l := range op.Lines {
		if !validSKU(l.SKU) || l.Qty <= 0 || l.Qty > wire.MaxQty {
			return bad("line %d needs a sku and a quantity of 1 to %d", i+1, wire.MaxQty)
		}
	}
	if op.Kind == OpScan {
		return nil
	}
	if err := checkDate(op.BusinessDate); err != nil {
		return err
	}
	if op.Total < 0 {
		return bad("total %s is negative", op.Total)
	}
	var amounts []money.Fen
	for m, f := range op.ByMethod {
		if !wire.ValidMethod(m) || f < 0 {
			return bad("payment method %q with %s is not cash, card or qr with an amount ≥ 0", m, f)
		}
		amounts = append(amounts, f)
	}
	if sum, err := money.Sum(amounts...); err != nil || sum != op.Total {
		return bad("amounts by method do not add up to the total %s", op.Total)
	}
	return nil
}

// verdict turns a script's reply (lua/lib.lua, reply) into a Verdict; op is nil for Allow.
func (g *Gate) verdict(res []any, op *Op) (Verdict, error) {
	if len(res) != 14 {
		return Verdict{}, perr.New(perr.Internal, CodeRedis, "gate script answered %d values, want 14", len(res))
	}
	str := func(i int) string { s, _ := res[i].(string); return s }
	num := func(i int) int64 { n, _ := res[i].(int64); return n }
	v := Verdict{
		Status:    wire.AckStatus(str(0)),
		Code:      str(1),
		FlowNo:    num(2),
		Oversold:  num(3) == 1,
		Layer:     str(5),
		Remaining: [3]int64{num(6), num(7), num(8)},
	}
	switch v.Status {
	case wire.AckAccepted:
	case wire.AckDuplicate:
		v.Message = fmt.Sprintf("event %s was already processed", wire.Key(op.Terminal, op.Seq))
	case wire.AckConflict:
		v.FlowNo = 0
		v.Message = fmt.Sprintf("event key %s was already used with other content; the original stands", wire.Key(op.Terminal, op.Seq))
	case wire.AckRejected:
		v.Message = fmt.Sprintf("not enough %q in stock (%d left, %d asked)", str(11), max(num(12), 0), num(13))
	case wire.AckRateLimited:
		ms := min(max((num(4)+999)/1000, 1), max(num(10), 1))
		v.RetryAfter = time.Duration(ms) * time.Millisecond
		v.Message = fmt.Sprintf("%s limit reached (%d per %dms); retry in %dms", v.Layer, num(9), num(10), ms)
	default:
		return Verdict{}, perr.New(perr.Internal, CodeRedis, "gate script answered status %q", v.Status)
	}
	return v, nil
}

// loadScripts loads every script of the gate (SCRIPT LOAD; on a cluster client, into every
// master), so that the first calls after a rebuild need not send a script's text.
func (g *Gate) loadScripts(ctx context.Context) error {
	for _, s := range allScripts {
		if err := s.Load(ctx, g.rdb).Err(); err != nil {
			return g.fail("load scripts", err)
		}
	}
	return nil
}
