// Package gate is the store's fast gate on Redis: the layered live rate limits, stock
// checked and decremented for all lines at once, fen counters per terminal and business
// date, the store flow number and idempotency records: a group of events is decided in
// order by one Lua script call (package lua, exec.lua) that Redis runs atomically.
//
// Redis is a projection here, never the judge: the store ledger is. After any doubt
// (failover, restart, degraded mode) the caller rebuilds the projection from the ledger
// with Rebuild before live traffic resumes. Absence is never zero: Rebuild writes a
// projection marker (lua/proj.lua) that every script reading the projection checks first,
// and a projection Redis dropped in part or in whole is answered with a *perr.Error of code
// CodeProjectionLost, with no effect, instead of being read as zero stock or counters. The gate must never take the time from its
// caller (scripts read Redis TIME), never use a float for money or limits, and never touch
// a key outside its store's hash tag "{store}", so that it runs on a Redis Cluster.
//
// Key layout, for store S, terminal T, business date D (YYYY-MM-DD):
//
//	pg:{S}:stock              HASH   sku → quantity (may be negative after offline sales)
//	pg:{S}:idem:E:T:seq       STRING "hash|status|flow|oversold" in rebuild epoch E, expires after Options.IdemTTL
//	pg:{S}:cnt:D:T            HASH   sales amount m:<method> refunds refund_amount rm:<method> (fen)
//	pg:{S}:cntidx:D           SET    the terminals that have counters for D
//	pg:{S}:flow:D             STRING the last store flow number given out for D
//	pg:{S}:rl:store           ZSET   sliding-window log of the store layer (scores: µs)
//	pg:{S}:rl:t:T             ZSET   log of the terminal layer
//	pg:{S}:rl:a:T:action      ZSET   log of the terminal's action layer (scan, pay, refund)
//	pg:{S}:rl:seq             STRING counter making log members unique
//	pg:{S}:limits             HASH   overrides of store.Limits, by JSON field name
//	pg:{S}:promo              STRING promo coefficient, integer percent, expires by itself
//	pg:{S}:adj:id             STRING "delta|sku" of an applied adjustment, expires after IdemTTL
//	pg:{S}:projection         HASH   the projection marker: epoch E (raised by every Rebuild), the stock
//	                                 hash's field count, each date's index count and flow counter
//
// The keys of a business date (cnt, cntidx, flow) go once HQ has acknowledged the day
// (ExpireDay, called by the store's day sweep, which also stops the marker tracking them): Redis holds the days not yet at HQ.
package gate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/lua"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/store"
	"github.com/redis/go-redis/v9"
)

// The scripts, wrapped once: Run and EvalSha send their SHA-1, EVAL only on NOSCRIPT.
var (
	execScript    = redis.NewScript(lua.Exec)
	allowScript   = redis.NewScript(lua.Allow)
	adjustScript  = redis.NewScript(lua.Adjust)
	rebuildScript = redis.NewScript(lua.Rebuild)

	allScripts = []*redis.Script{execScript, allowScript, adjustScript, rebuildScript}
)

// Client is the part of go-redis the gate uses. *redis.Client (also as returned by
// redis.NewFailoverClient), *redis.ClusterClient and redis.UniversalClient satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	TxPipeline() redis.Pipeliner
	Ping(ctx context.Context) *redis.StatusCmd
	Get(ctx context.Context, key string) *redis.StringCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	HExists(ctx context.Context, key, field string) *redis.BoolCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	Incr(ctx context.Context, key string) *redis.IntCmd
	Info(ctx context.Context, section ...string) *redis.StringCmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = redis.UniversalClient(nil)
)

// Options tune a Gate. Zero values take the defaults.
type Options struct {
	IdemTTL  time.Duration // how long idempotency and adjustment records live; default 7 days
	PromoTTL time.Duration // how long a promo lasts when SetPromo gets no TTL; default 2 hours
}

// Defaults of Options.
const (
	DefaultIdemTTL  = 7 * 24 * time.Hour
	DefaultPromoTTL = 2 * time.Hour
)

// Bounds of the values the gate accepts. They keep every product the scripts compute
// (limit × promo percent) far below 2^53, where Lua's numbers are exact integers.
const (
	MaxLimit     = 1_000_000_000       // any limit of store.Limits
	MaxWindowMs  = 24 * 60 * 60 * 1000 // store.Limits.WindowMs: one day
	MaxPromo     = 10_000              // promo percent: ×100
	MaxAllowN    = 1000                // events in one Allow call
	maxAdjustLen = 128                 // adjustment ids
)

// Error codes of the gate (besides those in Verdict.Code).
const (
	CodeInvalid            = "gate_invalid"        // perr.Invalid: an argument breaks a rule
	CodeAdjustmentConflict = "adjustment_conflict" // perr.Conflict: an id reused with another sku or delta
	CodeUnavailable        = "redis_unavailable"   // perr.Unavailable: Redis cannot be reached or is failing over
	CodeRedis              = "redis_error"         // perr.Internal: Redis answered with an unexpected error
	// CodeProjectionLost (perr.Unavailable): Redis no longer holds the projection the last
	// Rebuild wrote (the marker is missing or names another epoch, a stock field, counter
	// hash, counter index or flow counter is gone); the call changed nothing. LostReason
	// tells which.
	CodeProjectionLost = "projection_lost"
)

// Gate is the fast gate of one store. It is safe for concurrent use.
type Gate struct {
	rdb   Client
	store string
	k     keys
	o     Options
	// epoch namespaces idempotency records: every Rebuild starts a new one, so that an event
	// whose effects the rebuild discarded (it never reached the ledger) is applied again
	// instead of being answered as a duplicate of effects that no longer exist.
	epoch atomic.Int64
	// server is the run_id of the Redis server the projection was last rebuilt on; stale
	// is set when a new connection finds another server behind the address (Connected).
	server atomic.Pointer[string]
	stale  atomic.Bool
}

// Connected is an OnConnect hook for the gate's client (redis.Options.OnConnect): a new
// connection that reaches another Redis server than the one the projection was rebuilt
// on (Redis restarted, empty or from an older dump, or another master) marks the
// projection stale, and Exec answers Unavailable until a rebuild: the store sells on the
// ledger alone meanwhile and rebuilds at its next probe. go-redis reconnects silently, so
// without it a restart between two calls went unnoticed and the projection was trusted.
func (g *Gate) Connected(ctx context.Context, cn *redis.Conn) error {
	cur := g.server.Load()
	if cur == nil {
		return nil // not rebuilt yet
	}
	id, err := runID(cn.Info(ctx, "server"))
	if err != nil {
		return nil // the next command on it will tell what is wrong
	}
	if id != *cur {
		g.stale.Store(true)
	}
	return nil
}

// runID returns the run_id an INFO server answer names.
func runID(info *redis.StringCmd) (string, error) {
	text, err := info.Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(text) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id, nil
		}
	}
	return "", errors.New("INFO server names no run_id")
}

// New returns the gate of store storeID on rdb. It panics if storeID is not a valid id
// (wire.ValidID), which configuration validation checks first.
func New(rdb Client, storeID string, o Options) *Gate {
	if !wire.ValidID(storeID) {
		panic(fmt.Sprintf("gate: invalid store id %q", storeID))
	}
	if o.IdemTTL <= 0 {
		o.IdemTTL = DefaultIdemTTL
	}
	if o.PromoTTL <= 0 {
		o.PromoTTL = DefaultPromoTTL
	}
	return &Gate{rdb: rdb, store: storeID, k: keys("pg:{" + storeID + "}:"), o: o}
}

// keys builds the key names of one store; its value is the prefix "pg:{S}:".
type keys string

func (k keys) stock() string { return string(k) + "stock" }
func (k keys) idem(epoch int64, t string, seq int64) string {
	return string(k) + "idem:" + strconv.FormatInt(epoch, 10) + ":" + t + ":" + strconv.FormatInt(seq, 10)
}
func (k keys) marker() string                  { return string(k) + "projection" }
func (k keys) counters(date, t string) string  { return string(k) + "cnt:" + date + ":" + t }
func (k keys) counterIndex(date string) string { return string(k) + "cntidx:" + date }
func (k keys) flow(date string) string         { return string(k) + "flow:" + date }
func (k keys) rlStore() string                 { return string(k) + "rl:store" }
func (k keys) rlTerminal(t string) string      { return string(k) + "rl:t:" + t }
func (k keys) rlAction(t, a string) string     { return string(k) + "rl:a:" + t + ":" + a }
func (k keys) rlSeq() string                   { return string(k) + "rl:seq" }
func (k keys) limits() string                  { return string(k) + "limits" }
func (k keys) promo() string                   { return string(k) + "promo" }
func (k keys) adjustment(id string) string     { return string(k) + "adj:" + id }

// Ping checks that Redis answers.
func (g *Gate) Ping(ctx context.Context) error {
	return g.fail("ping", g.rdb.Ping(ctx).Err())
}

// Stock returns the stock of every SKU the store tracks.
func (g *Gate) Stock(ctx context.Context) (map[string]int64, error) {
	m, err := g.rdb.HGetAll(ctx, g.k.stock()).Result()
	if err != nil {
		return nil, g.fail("read stock", err)
	}
	out := make(map[string]int64, len(m))
	for sku, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, g.corrupt(g.k.stock(), sku, v)
		}
		out[sku] = n
	}
	return out, nil
}

// Flow returns the last store flow number given out for a business date (0 for none).
func (g *Gate) Flow(ctx context.Context, date string) (int64, error) {
	if err := checkDate(date); err != nil {
		return 0, err
	}
	v, err := g.rdb.Get(ctx, g.k.flow(date)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, g.fail("read flow number", err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, g.corrupt(g.k.flow(date), "", v)
	}
	return n, nil
}

// Counters returns the counters of every terminal with sales or refunds on a business
// date. The terminals are read first and their counters next, in one more round trip;
// a terminal's first event in between may be missing from the answer.
func (g *Gate) Counters(ctx context.Context, date string) (map[string]client.Counters, error) {
	if err := checkDate(date); err != nil {
		return nil, err
	}
	terms, err := g.rdb.SMembers(ctx, g.k.counterIndex(date)).Result()
	if err != nil {
		return nil, g.fail("read counter index", err)
	}
	out := make(map[string]client.Counters, len(terms))
	if len(terms) == 0 {
		return out, nil
	}
	pipe := g.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(terms))
	for i, t := range terms {
		cmds[i] = pipe.HGetAll(ctx, g.k.counters(date, t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, g.fail("read counters", err)
	}
	for i, t := range terms {
		c, err := g.parseCounters(g.k.counters(date, t), cmds[i].Val())
		if err != nil {
			return nil, err
		}
		out[t] = c
	}
	return out, nil
}

// Counter hash fields.
const (
	fieldSales        = "sales"
	fieldAmount       = "amount"
	fieldRefunds      = "refunds"
	fieldRefundAmount = "refund_amount"
	prefixMethod      = "m:"
	prefixRefund      = "rm:"
)

func (g *Gate) parseCounters(key string, m map[string]string) (client.Counters, error) {
	c := client.Counters{ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
	for f, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, g.corrupt(key, f, v)
		}
		switch {
		case f == fieldSales:
			c.Sales = n
		case f == fieldAmount:
			c.Amount = money.Fen(n)
		case f == fieldRefunds:
			c.Refunds = n
		case f == fieldRefundAmount:
			c.RefundAmount = money.Fen(n)
		case strings.HasPrefix(f, prefixMethod):
			c.ByMethod[f[len(prefixMethod):]] = money.Fen(n)
		case strings.HasPrefix(f, prefixRefund):
			c.RefundByMethod[f[len(prefixRefund):]] = money.Fen(n)
		default:
			return c, g.corrupt(key, f, v)
		}
	}
	return c, nil
}

// counterFields is the inverse of parseCounters: the fields of c that are not zero, as
// (field, value) pairs of decimal text.
func counterFields(c client.Counters) []any {
	var out []any
	add := func(f string, n int64) {
		if n != 0 {
			out = append(out, f, strconv.FormatInt(n, 10))
		}
	}
	add(fieldSales, c.Sales)
	add(fieldAmount, int64(c.Amount))
	for _, m := range slices.Sorted(maps.Keys(c.ByMethod)) {
		add(prefixMethod+m, int64(c.ByMethod[m]))
	}
	add(fieldRefunds, c.Refunds)
	add(fieldRefundAmount, int64(c.RefundAmount))
	for _, m := range slices.Sorted(maps.Keys(c.RefundByMethod)) {
		add(prefixRefund+m, int64(c.RefundByMethod[m]))
	}
	return out
}

// limitFields names the fields of store.Limits as the limits hash and the scripts do.
var limitFields = []struct {
	name string
	get  func(*store.Limits) *int64
}{
	{"window_ms", func(l *store.Limits) *int64 { return &l.WindowMs }},
	{"store", func(l *store.Limits) *int64 { return &l.Store }},
	{"terminal", func(l *store.Limits) *int64 { return &l.Terminal }},
	{store.ActionScan, func(l *store.Limits) *int64 { return &l.Scan }},
	{store.ActionPay, func(l *store.Limits) *int64 { return &l.Pay }},
	{store.ActionRefund, func(l *store.Limits) *int64 { return &l.Refund }},
}

// Limits returns the store's live limits: the overrides set with SetLimits, and
// store.DefaultLimits for the fields not set.
func (g *Gate) Limits(ctx context.Context) (store.Limits, error) {
	m, err := g.rdb.HGetAll(ctx, g.k.limits()).Result()
	if err != nil {
		return store.Limits{}, g.fail("read limits", err)
	}
	l := store.DefaultLimits
	for _, f := range limitFields {
		v, ok := m[f.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return store.Limits{}, g.corrupt(g.k.limits(), f.name, v)
		}
		*f.get(&l) = n
	}
	return l, nil
}

// CheckLimits returns a perr.Invalid error (code gate_invalid) if l breaks a rule of
// SetLimits.
func CheckLimits(l store.Limits) error {
	for _, f := range limitFields {
		v, top := *f.get(&l), int64(MaxLimit)
		if f.name == "window_ms" {
			top = MaxWindowMs
		}
		if v < 0 || v > top {
			return perr.New(perr.Invalid, CodeInvalid, "limit %s must be between 0 (the default) and %d, got %d", f.name, top, v)
		}
	}
	return nil
}

// CheckPromo returns a perr.Invalid error (code gate_invalid) if a promo of percent for ttl
// breaks a rule of SetPromo (ttl ≤ 0 is Options.PromoTTL there).
func CheckPromo(percent int64, ttl time.Duration) error {
	if percent < 1 || percent > MaxPromo {
		return perr.New(perr.Invalid, CodeInvalid, "promo percent must be between 1 and %d, got %d", MaxPromo, percent)
	}
	if ttl > 0 && ttl < time.Millisecond {
		return perr.New(perr.Invalid, CodeInvalid, "promo must last at least 1ms, got %v", ttl)
	}
	return nil
}

// SetLimits sets the store's live limits. A zero field means the default
// (store.DefaultLimits); limits go up to MaxLimit and the window up to MaxWindowMs. The
// new limits apply to the next call of every script, with the entries already in the
// windows.
func (g *Gate) SetLimits(ctx context.Context, l store.Limits) error {
	if err := CheckLimits(l); err != nil {
		return err
	}
	pipe := g.rdb.TxPipeline()
	g.setLimits(ctx, pipe, l)
	_, err := pipe.Exec(ctx)
	return g.fail("set limits", err)
}

func (g *Gate) setLimits(ctx context.Context, pipe redis.Pipeliner, l store.Limits) {
	for _, f := range limitFields {
		if v := *f.get(&l); v > 0 {
			pipe.HSet(ctx, g.k.limits(), f.name, strconv.FormatInt(v, 10))
		} else {
			pipe.HDel(ctx, g.k.limits(), f.name)
		}
	}
}

// SetPromo multiplies every live limit by percent/100 (150 = ×1.5, rounded down) for ttl,
// after which the promo ends by itself; ttl ≤ 0 means Options.PromoTTL. percent is 1 to
// MaxPromo; 100 ends a running promo at once.
func (g *Gate) SetPromo(ctx context.Context, percent int64, ttl time.Duration) error {
	if err := CheckPromo(percent, ttl); err != nil {
		return err
	}
	if ttl <= 0 {
		ttl = g.o.PromoTTL
	}
	pipe := g.rdb.TxPipeline()
	g.setPromo(ctx, pipe, percent, ttl)
	_, err := pipe.Exec(ctx)
	return g.fail("set promo", err)
}

func (g *Gate) setPromo(ctx context.Context, pipe redis.Pipeliner, percent int64, ttl time.Duration) {
	if percent == 100 || ttl <= 0 {
		pipe.Del(ctx, g.k.promo())
	} else {
		pipe.Set(ctx, g.k.promo(), strconv.FormatInt(percent, 10), ttl)
	}
}

// SetPolicy gives Redis the live limits and promo of p as they stand at now, in one
// transaction: the limits exactly, and the promo for what is left of it, or none.
func (g *Gate) SetPolicy(ctx context.Context, p store.Policy, now time.Time) error {
	if err := CheckLimits(p.Limits); err != nil {
		return err
	}
	pct, left := p.Promo(now)
	if left = left.Round(time.Millisecond); left <= 0 {
		pct = 100 // a promo with less than half a millisecond left is over
	}
	if err := CheckPromo(pct, left); err != nil {
		return err
	}
	pipe := g.rdb.TxPipeline()
	g.setLimits(ctx, pipe, p.Limits)
	g.setPromo(ctx, pipe, pct, left)
	_, err := pipe.Exec(ctx)
	return g.fail("set limits and promo", err)
}

// Promo returns the running promo coefficient in percent and the time it has left, or 100
// and 0 when no promo runs.
func (g *Gate) Promo(ctx context.Context) (percent int64, ttl time.Duration, err error) {
	pipe := g.rdb.TxPipeline()
	get := pipe.Get(ctx, g.k.promo())
	pttl := pipe.PTTL(ctx, g.k.promo())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, g.fail("read promo", err)
	}
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		return 100, 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, 0, g.corrupt(g.k.promo(), "", v)
	}
	return n, max(pttl.Val(), 0), nil
}

// Adjust adds delta (non-zero) to a SKU's stock once per adjustment id and returns the
// SKU's stock after it. A second call with the same id, SKU and delta changes nothing and
// returns applied false with the current stock; the same id with another SKU or delta is
// a perr.Conflict error (code "adjustment_conflict"). Ids are remembered for
// Options.IdemTTL.
func (g *Gate) Adjust(ctx context.Context, id, sku string, delta int64) (qty int64, applied bool, err error) {
	switch {
	case id == "" || len(id) > maxAdjustLen:
		return 0, false, perr.New(perr.Invalid, CodeInvalid, "adjustment id must be 1 to %d bytes", maxAdjustLen)
	case !validSKU(sku):
		return 0, false, perr.New(perr.Invalid, CodeInvalid, "adjustment needs a sku of 1 to %d bytes", wire.MaxTextLen)
	case delta == 0:
		return 0, false, perr.New(perr.Invalid, CodeInvalid, "adjustment of %q by 0 changes nothing", sku)
	}
	res, err := adjustScript.Run(ctx, g.rdb, []string{g.k.adjustment(id), g.k.stock(), g.k.marker()},
		sku, strconv.FormatInt(delta, 10), g.o.IdemTTL.Milliseconds(), g.epoch.Load()).Int64Slice()
	if err != nil {
		return 0, false, g.fail("adjust stock", err)
	}
	if len(res) != 2 {
		return 0, false, perr.New(perr.Internal, CodeRedis, "adjust script answered %v", res)
	}
	if res[1] < 0 {
		return res[0], false, perr.New(perr.Conflict, CodeAdjustmentConflict,
			"adjustment %q was already applied with another sku or quantity; the original stands", id)
	}
	return res[0], res[1] == 1, nil
}

// fail translates a go-redis error into a *perr.Error: Redis unreachable, failing over or
// loading is perr.Unavailable; any other answer from Redis is perr.Internal.
func (g *Gate) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *perr.Error
	if errors.As(err, &pe) {
		return err
	}
	if reason, ok := lostReason(err); ok {
		return perr.Wrap(err, perr.Unavailable, CodeProjectionLost, "gate %s: %s: the Redis projection is lost (%s); it is rebuilt from the ledger", g.store, what, reason)
	}
	var re redis.Error
	if errors.As(err, &re) && !redis.IsReadOnlyError(err) && !redis.IsLoadingError(err) &&
		!redis.IsMasterDownError(err) && !redis.IsClusterDownError(err) && !redis.IsTryAgainError(err) {
		return perr.Wrap(err, perr.Internal, CodeRedis, "gate %s: %s", g.store, what)
	}
	return perr.Wrap(err, perr.Unavailable, CodeUnavailable, "gate %s: %s: redis unavailable", g.store, what)
}

// lostPrefix starts the error a script answers when the projection marker check fails
// (lua/proj.lua): "LOST <reason>".
const lostPrefix = "LOST "

// lostReason returns the reason of a script's LOST answer.
func lostReason(err error) (string, bool) {
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), lostPrefix) {
		return "", false
	}
	return strings.TrimPrefix(re.Error(), lostPrefix), true
}

// The reasons of CodeProjectionLost (lua/proj.lua).
const (
	LostMarkerMissing   = "marker_missing"   // no marker: the store's keys or all keys were dropped
	LostEpochMismatch   = "epoch_mismatch"   // the marker is another rebuild's (an older dump restored, another store-server)
	LostStockMissing    = "stock_missing"    // the stock hash lacks fields the marker counts
	LostCountersMissing = "counters_missing" // a counter hash or a date's counter index was dropped
	LostFlowMissing     = "flow_missing"     // a date's flow counter was dropped
)

// LostReason returns why the gate answered CodeProjectionLost (lua/proj.lua):
// marker_missing, epoch_mismatch, stock_missing, counters_missing or flow_missing; ok is
// false for any other error.
func LostReason(err error) (reason string, ok bool) {
	if err == nil || perr.As(err).Code != CodeProjectionLost {
		return "", false
	}
	return lostReason(err)
}

// corrupt reports a value in Redis that no script of the gate writes.
func (g *Gate) corrupt(key, field, v string) error {
	return perr.New(perr.Internal, CodeRedis, "gate: %s %s holds %q, not a gate value", key, field, v)
}

func checkDate(date string) error {
	if _, err := time.Parse(wire.BusinessDate, date); err != nil || len(date) != len(wire.BusinessDate) {
		return perr.New(perr.Invalid, CodeInvalid, "business date %q is not YYYY-MM-DD", date)
	}
	return nil
}

func validSKU(sku string) bool { return sku != "" && len(sku) <= wire.MaxTextLen }
