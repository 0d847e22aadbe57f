package gate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
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

// Exec decides ops in order, in one pipelined round trip with one EVALSHA per op: an op
// sees the effects of the ops before it. It returns one verdict per op, or an error (a
// *perr.Error) when Redis could not decide them all; ops before the failing one may have
// been applied, and running them again is safe (they are then duplicates).
//
// Order holds even when Redis lost its scripts (failover, restart): each op of a pipeline
// runs only after the one before it (an order guard key), and the ops from the first
// NOSCRIPT on are sent again once the scripts are loaded.
func (g *Gate) Exec(ctx context.Context, ops []Op) ([]Verdict, error) {
	calls := make([]call, len(ops))
	for i := range ops {
		c, err := g.call(&ops[i])
		if err != nil {
			return nil, err
		}
		calls[i] = c
	}
	verdicts := make([]Verdict, len(ops))
	switch len(ops) {
	case 0:
		return verdicts, nil
	case 1:
		c := &calls[0]
		c.args[8], c.args[9] = "0", "1"
		res, err := c.script.Run(ctx, g.rdb, c.keys, c.args...).Slice()
		if err != nil {
			return nil, g.fail("exec "+c.op.Kind.String(), err)
		}
		if verdicts[0], err = g.verdict(res, c.op); err != nil {
			return nil, err
		}
		return verdicts, nil
	}
	guard := g.k.guard(g.exec.next())
	for i := range calls {
		c := &calls[i]
		c.keys = append(c.keys, guard)
		c.args[8] = strconv.Itoa(i)
		c.args[9] = "0"
		if i == len(calls)-1 {
			c.args[9] = "1"
		}
	}
	from := 0
	for attempt := 0; ; attempt++ {
		pipe := g.rdb.Pipeline()
		cmds := make([]*redis.Cmd, 0, len(calls)-from)
		for _, c := range calls[from:] {
			cmds = append(cmds, c.script.EvalSha(ctx, pipe, c.keys, c.args...))
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		failed := -1
		for j, cmd := range cmds {
			i := from + j
			res, err := cmd.Slice()
			if isNoScript(err) && attempt < 2 {
				failed = i
				break
			}
			if err != nil {
				return nil, g.fail(fmt.Sprintf("exec op %d (%s)", i, calls[i].op.Kind), err)
			}
			if verdicts[i], err = g.verdict(res, calls[i].op); err != nil {
				return nil, err
			}
		}
		if failed < 0 {
			return verdicts, nil
		}
		// Redis lost its scripts: the op at failed did nothing and the ops after it refused
		// (the order guard). Load every script, then send them again from there.
		if err := g.loadScripts(ctx); err != nil {
			return nil, err
		}
		from = failed
	}
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

// call is one op ready for its script.
type call struct {
	op     *Op
	script *redis.Script
	keys   []string
	args   []any // args[8] and args[9] (ARGV 9, 10: guard position, last op) are set by Exec
}

// call validates op and builds its script call (see lua/ops.lua for the layout).
func (g *Gate) call(op *Op) (call, error) {
	if err := checkOp(op); err != nil {
		return call{}, err
	}
	t, action := op.Terminal, op.Kind.action()
	keys := make([]string, 0, 12)
	keys = append(keys, g.k.idem(g.epoch.Load(), t, op.Seq), g.k.stock(), g.k.rlStore(), g.k.rlTerminal(t),
		g.k.rlAction(t, action), g.k.rlSeq(), g.k.limits(), g.k.promo())
	live := "0"
	if op.Live {
		live = "1"
	}
	d := store.DefaultLimits
	args := make([]any, 0, 16+2*len(op.Lines)+2*len(op.ByMethod))
	args = append(args, op.Hash, live, g.o.IdemTTL.Milliseconds(), d.WindowMs, d.Store, d.Terminal,
		d.Action(action), action, "0", "1")
	c := call{op: op}
	switch op.Kind {
	case OpScan:
		c.script = scanScript
		args = append(args, op.Lines[0].SKU, op.Lines[0].Qty)
	case OpSale, OpRefund:
		c.script = saleScript
		keys = append(keys, g.k.counters(op.BusinessDate, t), g.k.counterIndex(op.BusinessDate), g.k.flow(op.BusinessDate))
		args = append(args, t)
		if op.Kind == OpRefund {
			c.script = refundScript
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
	c.keys, c.args = keys, args
	return c, nil
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
// master).
func (g *Gate) loadScripts(ctx context.Context) error {
	for _, s := range allScripts {
		if err := s.Load(ctx, g.rdb).Err(); err != nil {
			return g.fail("load scripts", err)
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// execIDs hands out the tokens of pipelined Execs' order guards: a random prefix per
// Gate and a counter, unique across processes and restarts.
type execIDs struct {
	prefix string
	n      *atomic.Uint64
}

func newExecIDs() execIDs {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return execIDs{prefix: hex.EncodeToString(b), n: new(atomic.Uint64)}
}

func (e execIDs) next() string {
	return e.prefix + "-" + strconv.FormatUint(e.n.Add(1), 36)
}
