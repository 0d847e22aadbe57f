// Package api is the store-server's local API for store managers (token auth): the gate
// mode, stock, adjustments and shelf counts, catalog import, the store's and each
// terminal's day from the ledger, from Redis and as the terminals declared it, with the
// differences, oversell and refund exceptions and their resolution, parked events, the
// terminals (presence, last event, reported backlog, clock against the store's), how far
// headquarters has the store's rows, limits and the promo coefficient; the Prometheus
// metrics; and the web dashboard that reads them. Errors are application/problem+json with
// a stable code. It never writes the ledger except through the ledger's own idempotent
// methods.
//
// The requests and answers are store-server/client's types, which Go programs call the API
// with.
package api

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/disk"
	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/history"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/presence"
	"github.com/posgate/posgate/store-server/settings"
	"github.com/posgate/posgate/store-server/store"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// publisher publishes the store's retained messages: its catalog and its settings.
type publisher interface {
	catalog.Publisher
	settings.Publisher
}

// Server serves the manager API.
type Server struct {
	Token   string
	Store   string
	Ledger  *ledger.Ledger
	Gate    *gate.Gate
	Ingest  *ingest.Ingest
	Catalog *catalog.Catalog
	// Settings, if not nil, are the store's settings for its terminals (supervisors,
	// refund rules), published through Pub.
	Settings *settings.Settings
	Pub      publisher
	// Presence, if not nil, is the terminals' presence from their status topics.
	Presence *presence.Board
	// Metrics, if not nil, serves GET /metrics (Prometheus text format), to the manager token
	// or to MetricsToken, which opens nothing else.
	Metrics      http.Handler
	MetricsToken string
	// Tokens are the tokens of one role each (LoadTokens), besides Token, which may do
	// everything.
	Tokens []RoleToken
	// Failures counts requests without a valid token per client address (nil: a guard
	// of the defaults).
	Failures *guard.Guard
	// Refusals, if not nil, books every request refused (unauthorized, forbidden,
	// too_many_failures).
	Refusals Booker
	// UploadState is the state file of the store's hq-sync uploader, read for GET /v1/hq
	// ("": not shown).
	UploadState string
	// DiskWarnBytes: below this much free room on the ledger's file system, /v1/mode says
	// the disk is low (0: never).
	DiskWarnBytes int64
	// History, if not nil, keeps the samples GET /v1/charts/history answers.
	History *history.Recorder
	// BackupStall is how long the download of a backup may make no progress before it is
	// dropped (0: DefaultBackupStall).
	BackupStall time.Duration
	Now         func() time.Time
	Logger      *slog.Logger

	mux      *http.ServeMux
	backupMu sync.Mutex // one backup at a time
	failOnce sync.Once
}

// Handler returns the API's handler.
func (s *Server) Handler() http.Handler {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, client.HealthAnswer{OK: true, Mode: s.Ingest.Mode()})
	})
	s.route("GET /v1/mode", s.mode)
	s.route("GET /v1/stock", s.stock)
	s.route("POST /v1/stock/adjust", s.adjust)
	s.route("POST /v1/stock/count", s.count)
	s.route("GET /v1/catalog", s.getCatalog)
	s.route("POST /v1/catalog", s.importCatalog)
	s.route("GET /v1/settings", s.getSettings)
	s.route("PUT /v1/settings/supervisors/{name}", s.setSupervisor)
	s.route("DELETE /v1/settings/supervisors/{name}", s.removeSupervisor)
	s.route("PUT /v1/settings/refunds", s.setRefundRules)
	s.route("GET /v1/totals", s.totals)
	s.route("GET /v1/oversells", s.oversells)
	s.route("POST /v1/oversells/resolve", s.resolveOversell)
	s.route("GET /v1/price-exceptions", s.prices)
	s.route("POST /v1/price-exceptions/resolve", s.resolvePrice)
	s.route("GET /v1/flow-exceptions", s.flows)
	s.route("POST /v1/flow-exceptions/resolve", s.resolveFlow)
	s.route("GET /v1/refund-exceptions", s.refundExceptions)
	s.route("POST /v1/refund-exceptions/resolve", s.resolveRefundException)
	s.route("GET /v1/parked", s.parked)
	s.route("POST /v1/parked/resolve", s.resolveParked)
	s.route("GET /v1/terminals", s.terminals)
	s.route("GET /v1/hq", s.hq)
	s.route("GET /v1/charts/sales", s.salesChart)
	s.route("GET /v1/charts/history", s.history)
	s.route("GET /v1/limits", s.limits)
	s.route("PUT /v1/limits", s.setLimits)
	s.route("POST /v1/promo", s.setPromo)
	s.routeNeeding("GET /v1/whoami", needAny, s.whoami)
	s.mux.Handle("GET /v1/backup", s.guard(http.HandlerFunc(s.backup), needBackup))
	if s.Metrics != nil {
		s.mux.Handle("GET /metrics", s.guard(s.Metrics, needMetrics))
	}
	// The dashboard's files hold no data and need no token; the page asks for it and sends
	// it with every API request.
	s.mux.Handle("GET /{$}", dashboardFile("index.html", "text/html; charset=utf-8"))
	for name, ctype := range dashboardFiles {
		s.mux.Handle("GET /"+name, dashboardFile(name, ctype))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, perr.New(perr.NotFound, "route_not_found", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s.mux
}

//go:embed dashboard
var dashboard embed.FS

// dashboardFiles are the dashboard's files besides its page, by path: its scripts, style
// sheets, message catalogs (one per language) and uPlot, the chart library it draws with
// (vendor/uplot: its version and licence beside it).
var dashboardFiles = map[string]string{
	"dashboard.js":                   "text/javascript; charset=utf-8",
	"i18n.js":                        "text/javascript; charset=utf-8",
	"charts.js":                      "text/javascript; charset=utf-8",
	"dashboard.css":                  "text/css; charset=utf-8",
	"i18n/en.json":                   "application/json",
	"i18n/zh-CN.json":                "application/json",
	"vendor/uplot/uPlot.iife.min.js": "text/javascript; charset=utf-8",
	"vendor/uplot/uPlot.min.css":     "text/css; charset=utf-8",
	"vendor/uplot/LICENSE":           "text/plain; charset=utf-8",
}

// dashboardFile serves one of the dashboard's embedded files. The page loads only its own
// script and style sheet, and may not be framed.
func dashboardFile(name, ctype string) http.Handler {
	body, err := dashboard.ReadFile("dashboard/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		w.Write(body)
	})
}

// guard puts h behind the token check: a token whose role may do what n asks.
func (s *Server) guard(h http.Handler, n need) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.authorize(w, r, n) {
			h.ServeHTTP(w, r)
		}
	})
}

// route registers a JSON handler behind the token check: a read (GET) for the viewer's
// role, anything else for the operator's.
func (s *Server) route(pattern string, h func(*http.Request) (any, error)) {
	n := needWrite
	if strings.HasPrefix(pattern, "GET ") {
		n = needRead
	}
	s.routeNeeding(pattern, n, h)
}

// routeNeeding registers a JSON handler behind the token check for what n asks.
func (s *Server) routeNeeding(pattern string, n need, h func(*http.Request) (any, error)) {
	s.mux.Handle(pattern, s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		if err != nil {
			if perr.KindOf(err) == perr.Internal {
				s.Logger.Error("manager api", "path", r.URL.Path, "err", err)
			}
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}), n))
}

// bearer reports whether r carries token ("" matches nothing).
func bearer(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && token != "" &&
		subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func writeError(w http.ResponseWriter, err error) {
	e := perr.As(err)
	status := perr.HTTPStatus(e.Kind)
	detail := e.Message
	if e.Kind == perr.Internal {
		detail = "internal error"
	}
	body, _ := json.Marshal(client.Problem{Type: "https://posgate.dev/errors/" + e.Code, Title: http.StatusText(status),
		Status: status, Code: e.Code, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(body)
}

// writeJSON writes v as the answer. It is encoded before the status goes out: a value JSON
// cannot write (a time outside the years 0-9999) is an internal error, not a 200 with an
// empty body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		slog.Error("manager api: answer not encoded", "err", err)
		writeError(w, perr.Wrap(err, perr.Internal, "internal", "answer not encoded: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return perr.Wrap(err, perr.Invalid, "json_invalid", "the request body is not the expected JSON: %v", err)
	}
	return nil
}

func (s *Server) mode(r *http.Request) (any, error) {
	a := client.ModeAnswer{Store: s.Store, Mode: s.Ingest.Mode(), Stats: s.Ingest.Stats()}
	if sp, err := disk.Of(s.Ledger.Dir()); err == nil {
		a.Disk = &client.DiskAnswer{TotalBytes: sp.Total, FreeBytes: sp.Free, LedgerBytes: s.Ledger.FileBytes(),
			Low: sp.Free < s.DiskWarnBytes}
	}
	return a, nil
}

func (s *Server) stock(r *http.Request) (any, error) {
	ctx := r.Context()
	led, err := s.Ledger.Stock(ctx)
	if err != nil {
		return nil, err
	}
	var proven map[string]int64
	switch r.URL.Query().Get("proof") {
	case "", "1":
		if proven, err = s.Ledger.ProvenStock(ctx); err != nil {
			return nil, err
		}
	case "0":
	default:
		return nil, perr.New(perr.Invalid, "proof_invalid", "proof is 1 (default: prove each SKU from its stock moves) or 0")
	}
	unknown, err := s.Ledger.UnknownStock(ctx)
	if err != nil {
		return nil, err
	}
	red, rerr := s.redisStock(ctx)
	rows := []client.StockRow{}
	for sku, q := range led {
		row := client.StockRow{SKU: sku, Ledger: q, Unknown: unknown[sku]}
		if proven != nil {
			p := proven[sku]
			row.Proven = &p
		}
		if rerr == nil {
			v := red[sku]
			row.Redis, row.Diff = &v, v-q
		}
		rows = append(rows, row)
	}
	for sku, v := range red {
		if _, ok := led[sku]; !ok {
			rows = append(rows, client.StockRow{SKU: sku, Redis: &v, Diff: v})
		}
	}
	slices.SortFunc(rows, func(a, b client.StockRow) int { return strings.Compare(a.SKU, b.SKU) })
	return client.StockAnswer{Mode: s.Ingest.Mode(), Stock: rows}, nil
}

func (s *Server) redisStock(ctx context.Context) (map[string]int64, error) {
	if s.Ingest.Mode() != client.ModeRedis {
		return nil, errors.New("redis not in use")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return s.Gate.Stock(ctx)
}

func (s *Server) adjust(r *http.Request) (any, error) {
	var req client.AdjustRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	switch {
	case req.ID == "" || len(req.ID) > 128:
		return nil, perr.New(perr.Invalid, "adjustment_id_required", "give each adjustment a unique id (at most 128 characters)")
	case !s.Catalog.Known(req.SKU):
		return nil, perr.New(perr.NotFound, ingest.CodeUnknownSKU, "SKU %q was never in the catalog", req.SKU)
	case req.Delta == 0:
		return nil, perr.New(perr.Invalid, "delta_zero", "an adjustment must change the stock")
	}
	if req.Reason == "" {
		req.Reason = client.ReasonAdjust
	}
	if req.Reason != client.ReasonAdjust && req.Reason != client.ReasonOpening {
		return nil, perr.New(perr.Invalid, "reason_invalid", "reason is adjust or opening")
	}
	qty, applied, err := s.Ingest.AdjustStock(r.Context(), req.ID, req.SKU, req.Delta, req.Reason)
	if err != nil {
		return nil, err
	}
	return client.AdjustAnswer{SKU: req.SKU, Qty: qty, Applied: applied}, nil
}

func (s *Server) count(r *http.Request) (any, error) {
	var req client.CountRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	switch {
	case req.ID == "" || len(req.ID) > 128:
		return nil, perr.New(perr.Invalid, "adjustment_id_required", "give each count a unique id (at most 128 characters)")
	case !s.Catalog.Known(req.SKU):
		return nil, perr.New(perr.NotFound, ingest.CodeUnknownSKU, "SKU %q was never in the catalog", req.SKU)
	case req.Counted == nil:
		return nil, perr.New(perr.Invalid, ledger.CodeAdjustmentInvalid, "say how many units were counted on the shelf (counted)")
	}
	delta, qty, applied, err := s.Ingest.CountStock(r.Context(), req.ID, req.SKU, *req.Counted)
	if err != nil {
		return nil, err
	}
	return client.CountAnswer{SKU: req.SKU, Qty: qty, Applied: applied, Delta: delta}, nil
}

func (s *Server) getCatalog(r *http.Request) (any, error) { return s.Catalog.Current(), nil }

func (s *Server) importCatalog(r *http.Request) (any, error) {
	items, err := catalog.Parse(r.Header.Get("Content-Type"), r.Body)
	if err != nil {
		return nil, err
	}
	c, err := s.Catalog.Replace(items, s.Pub)
	var np *catalog.NotPublishedError
	switch {
	case errors.As(err, &np):
		// Installed: the terminals get it once the broker takes it. Answered as done, so
		// that the import is not sent again as another version.
		s.Logger.Warn("catalog installed, not yet published", "version", c.Version, "err", np.Err)
		return client.ImportAnswer{Version: c.Version, Items: len(c.Items), Published: false,
			Detail: "installed; the broker has not taken it yet, and the terminals get it once it does"}, nil
	case err != nil:
		return nil, err
	}
	return client.ImportAnswer{Version: c.Version, Items: len(c.Items), Published: true}, nil
}

func (s *Server) totals(r *http.Request) (any, error) {
	ctx := r.Context()
	date := r.URL.Query().Get("date")
	if date == "" {
		date = s.Ledger.BusinessDate(s.Now())
	}
	if err := checkDate(date); err != nil {
		return nil, err
	}
	led, err := s.Ledger.Totals(ctx, date)
	if err != nil {
		return nil, err
	}
	closes, err := s.Ledger.DayCloses(ctx, date)
	if err != nil {
		return nil, err
	}
	// Redis's counters of a date older than the rebuild's window (ledger.SnapshotDays) are
	// not kept equal to the ledger's: after a rebuild on an empty Redis they are gone, and
	// every terminal would show as differing. Nor are those of a day whose keys left Redis
	// once HQ held it (the day sweep), within the window too. They are compared within the
	// window only, on the days still in Redis.
	oldest := s.Ledger.BusinessDate(s.Now().AddDate(0, 0, -ledger.SnapshotDays))
	var red map[string]client.Counters
	var notCompared string
	mode := s.Ingest.Mode()
	switch {
	case mode != client.ModeRedis:
		notCompared = client.NotComparedMode
	case date < oldest:
		notCompared = client.NotComparedOld
	case s.Ledger.LeftRedis(date):
		notCompared = client.NotComparedLeftRedis
	default:
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		red, err = s.Gate.Counters(rctx, date)
		cancel()
		if err != nil {
			red, notCompared = nil, client.NotComparedUnreadable
		}
	}
	terms := map[string]bool{}
	for t := range led {
		terms[t] = true
	}
	for t := range red {
		terms[t] = true
	}
	for t := range closes {
		terms[t] = true
	}
	out := []client.TerminalTotals{}
	whole := client.Counters{ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
	for t := range terms {
		whole.Add(led[t])
		tt := client.TerminalTotals{Terminal: t, Ledger: led[t]}
		if red != nil {
			rc := red[t]
			tt.Redis, tt.RedisDiff = &rc, !rc.Equal(led[t])
		}
		if dc, ok := closes[t]; ok {
			d := client.DeclaredCounters(dc)
			match := d.Equal(led[t])
			tt.Declared, tt.DeclaredOK = &d, &match
		}
		out = append(out, tt)
	}
	slices.SortFunc(out, func(a, b client.TerminalTotals) int { return strings.Compare(a.Terminal, b.Terminal) })
	return client.TotalsAnswer{BusinessDate: date, Mode: mode, Store: whole, Terminals: out,
		RedisNotCompared: notCompared}, nil
}

// checkDate refuses a date query parameter that is given and is not a business date: a list
// of one day asked for "2026-1-30" answered that day had nothing.
func checkDate(date string) error {
	if date == "" {
		return nil
	}
	if _, err := time.Parse(wire.BusinessDate, date); err != nil || len(date) != len(wire.BusinessDate) {
		return perr.New(perr.Invalid, "business_date_invalid", "date %q is not YYYY-MM-DD", date)
	}
	return nil
}

// exceptionsQuery reads an exception list's ?date= (empty: every date) and ?all= (1: the
// resolved ones too).
func exceptionsQuery(r *http.Request) (date string, all bool, err error) {
	q := r.URL.Query()
	a := q.Get("all")
	if a != "" && a != "1" && a != "0" {
		return "", false, perr.New(perr.Invalid, "all_invalid", "all is 1 (resolved exceptions too) or 0")
	}
	if err := checkDate(q.Get("date")); err != nil {
		return "", false, err
	}
	return q.Get("date"), a == "1", nil
}

func (s *Server) oversells(r *http.Request) (any, error) {
	date, all, err := exceptionsQuery(r)
	if err != nil {
		return nil, err
	}
	o, err := s.Ledger.Oversells(r.Context(), date, all)
	if o == nil {
		o = []client.Oversell{}
	}
	return client.OversellsAnswer{Oversells: o}, err
}

func (s *Server) resolveOversell(r *http.Request) (any, error) {
	var req client.ResolveOversellRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	o, applied, err := s.Ledger.ResolveOversell(r.Context(), req.Terminal, req.Seq, req.SKU, req.Note)
	if err != nil {
		return nil, err
	}
	return client.ResolveOversellAnswer{Oversell: o, Applied: applied}, nil
}

func (s *Server) refundExceptions(r *http.Request) (any, error) {
	date, all, err := exceptionsQuery(r)
	if err != nil {
		return nil, err
	}
	x, err := s.Ledger.RefundExceptions(r.Context(), date, all)
	if x == nil {
		x = []client.RefundException{}
	}
	return client.RefundExceptionsAnswer{RefundExceptions: x}, err
}

func (s *Server) resolveRefundException(r *http.Request) (any, error) {
	var req client.ResolveRefundRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	x, applied, err := s.Ledger.ResolveRefundException(r.Context(), req.Terminal, req.Seq, req.Note)
	if err != nil {
		return nil, err
	}
	return client.ResolveRefundAnswer{RefundException: x, Applied: applied}, nil
}

func (s *Server) parked(r *http.Request) (any, error) {
	all := r.URL.Query().Get("all")
	if all != "" && all != "1" && all != "0" {
		return nil, perr.New(perr.Invalid, "all_invalid", "all is 1 (resolved parked events too) or 0")
	}
	p, err := s.Ledger.Parked(r.Context(), parkedListed, all == "1")
	if err != nil {
		return nil, err
	}
	// The list holds the most recently parked only: open says how many are open in all, so
	// that a list cut short says so.
	_, _, open, err := s.Ledger.OpenExceptions(r.Context())
	if err != nil {
		return nil, err
	}
	return client.ParkedAnswer{Parked: p, Open: open}, nil
}

// parkedListed is how many parked events GET /v1/parked lists, the most recently parked.
const parkedListed = 1000

func (s *Server) resolveParked(r *http.Request) (any, error) {
	var req client.ResolveParkedRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	p, applied, err := s.Ledger.ResolveParked(r.Context(), req.Terminal, req.Seq, req.Hash, req.Note)
	if err != nil {
		return nil, err
	}
	return client.ResolveParkedAnswer{Parked: p, Applied: applied}, nil
}

func (s *Server) terminals(r *http.Request) (any, error) { return s.terminalsAnswer(r.Context()) }

// terminalsAnswer is GET /v1/terminals's answer.
func (s *Server) terminalsAnswer(ctx context.Context) (client.TerminalsAnswer, error) {
	seen, err := s.Ledger.Terminals(ctx)
	if err != nil {
		return client.TerminalsAnswer{}, err
	}
	var live map[string]presence.Seen
	var reports map[string]presence.Backlog
	var clocks map[string]presence.Clock
	var skewLimit, behindConfirm time.Duration
	if s.Presence != nil {
		live, reports = s.Presence.All(), s.Presence.Backlogs()
		clocks, skewLimit, behindConfirm = s.Presence.Clocks(), s.Presence.SkewLimit(), s.Presence.BehindConfirm()
	}
	now := s.Now()
	version := s.Catalog.Current().Version
	rows := make([]client.TerminalRow, 0, len(seen)+len(live))
	add := func(row client.TerminalRow) {
		if p, ok := live[row.Terminal]; ok {
			row.Online, row.OnlineSince, row.StatusHeard = &p.Online, p.Since, p.Heard
			delete(live, row.Terminal)
		}
		if r, ok := reports[row.Terminal]; ok {
			if row.Heartbeat == nil || r.Supersedes(row.Heartbeat.Seq, row.Heartbeat.At) {
				// The board's report has the answer's fields, and the board's rules beside.
				row.Backlog = &client.BacklogRow{Backlog: client.Backlog(r), OldestNowMs: r.OldestAge(now).Milliseconds()}
			}
			delete(reports, row.Terminal)
		}
		held(&row, version)
		if c, ok := clocks[row.Terminal]; ok {
			if c.Unconfirmed {
				row.ClockUnconfirmed = true
			} else {
				ms := c.Skew.Milliseconds()
				row.ClockSkewMs, row.ClockOff = &ms, c.Off
			}
			row.ClockChecked = c.Checked
			delete(clocks, row.Terminal)
		}
		// The board's times are the server's clock and the till's stamps as sent: given in
		// the store's zone, as the ledger's are.
		row.OnlineSince, row.StatusHeard, row.ClockChecked = s.inStore(row.OnlineSince), s.inStore(row.StatusHeard), s.inStore(row.ClockChecked)
		if row.Backlog != nil {
			row.Backlog.At, row.Backlog.Heard = s.inStore(row.Backlog.At), s.inStore(row.Backlog.Heard)
		}
		if since := unknownSince(row); !since.IsZero() {
			since = s.inStore(since)
			row.BacklogUnknownSince = &since
		}
		rows = append(rows, row)
	}
	for _, ts := range seen {
		add(client.TerminalRow{TerminalSeen: ts})
	}
	for t := range live { // connected, nothing recorded yet
		add(client.TerminalRow{TerminalSeen: client.TerminalSeen{Terminal: t}})
	}
	for t := range reports { // a backlog reported, nothing else heard yet
		add(client.TerminalRow{TerminalSeen: client.TerminalSeen{Terminal: t}})
	}
	for t := range clocks { // a live event heard, not yet in the ledger
		add(client.TerminalRow{TerminalSeen: client.TerminalSeen{Terminal: t}})
	}
	slices.SortFunc(rows, func(a, b client.TerminalRow) int { return strings.Compare(a.Terminal, b.Terminal) })
	return client.TerminalsAnswer{Now: s.inStore(now), CatalogVersion: version, ClockSkewLimitMs: skewLimit.Milliseconds(),
		ClockBehindConfirmMs: behindConfirm.Milliseconds(), Terminals: rows}, nil
}

// held sets the catalog version the terminal last said it holds, from its backlog report or
// its heartbeat, whichever it took later, and how it stands against the store's version.
func held(row *client.TerminalRow, version int64) {
	var v *int64
	var at time.Time
	if b := row.Backlog; b != nil && b.CatalogVersion > 0 {
		cv := b.CatalogVersion
		v, at = &cv, b.At
	}
	if hb := row.Heartbeat; hb != nil && (v == nil || hb.At.After(at)) {
		cv := hb.CatalogVersion
		v = &cv
	}
	if v != nil {
		row.CatalogVersion, row.CatalogBehind, row.CatalogAhead = v, *v < version, *v > version
	}
}

// unknownSince returns when what a terminal holds became unknown: it is not known to be
// online and has reported a backlog (zero: it is online, or never reported one). Its status
// said offline: when the store heard that; none heard: when the report was heard.
func unknownSince(row client.TerminalRow) time.Time {
	if row.Online != nil && *row.Online {
		return time.Time{}
	}
	var heard time.Time
	switch {
	case row.Backlog != nil:
		heard = row.Backlog.Heard
	case row.Heartbeat != nil:
		heard = row.Heartbeat.Received
	default:
		return time.Time{}
	}
	if row.Online != nil && !row.StatusHeard.IsZero() {
		return row.StatusHeard
	}
	return heard
}

// inStore returns t in the store's zone (--tz, the ledger's), in which the API gives its
// times; the zero time stays zero.
func (s *Server) inStore(t time.Time) time.Time {
	if loc := s.Ledger.Location(); loc != nil && !t.IsZero() {
		return t.In(loc)
	}
	return t
}

func (s *Server) hq(r *http.Request) (any, error) {
	a := client.HQAnswer{State: s.UploadState}
	if s.UploadState == "" {
		return a, nil
	}
	st, err := uploadstate.ReadStatusOf(r.Context(), s.UploadState, s.Ledger)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, nil
	case err != nil:
		return nil, perr.Wrap(err, perr.Unavailable, "upload_state_unreadable", "the uploader's state %s cannot be read: %v",
			s.UploadState, err)
	}
	a.Found, a.Upload = true, &st
	return a, nil
}

func (s *Server) limits(r *http.Request) (any, error) {
	p, err := s.Ingest.Limits(r.Context())
	if err != nil {
		return nil, err
	}
	return limitsAnswer(p, s.Now()), nil
}

// limitsAnswer is what GET /v1/limits answers: the limits the manager set (the defaults for
// those not set) and the promo running at now.
func limitsAnswer(p store.Policy, now time.Time) client.LimitsAnswer {
	pct, left := p.Promo(now)
	return client.LimitsAnswer{Limits: client.Limits(p.Limits.OrDefault()), PromoPercent: pct,
		PromoExpiresInMs: left.Milliseconds()}
}

func (s *Server) setLimits(r *http.Request) (any, error) {
	var l client.Limits
	if err := decode(r, &l); err != nil {
		return nil, err
	}
	if l.WindowMs <= 0 || l.Store <= 0 || l.Terminal <= 0 || l.Scan <= 0 || l.Pay <= 0 || l.Refund <= 0 {
		return nil, perr.New(perr.Invalid, "limits_invalid", "every limit and the window must be positive")
	}
	p, err := s.Ingest.SetLimits(r.Context(), store.Limits(l))
	if err != nil {
		return nil, policyError(err, "limits_invalid")
	}
	return limitsAnswer(p, s.Now()), nil
}

func (s *Server) setPromo(r *http.Request) (any, error) {
	var req client.PromoRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	ttl := 2 * time.Hour
	if req.For != "" {
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 || d > 7*24*time.Hour {
			return nil, perr.New(perr.Invalid, "promo_duration_invalid", "for must be a duration up to 168h, e.g. 2h")
		}
		ttl = d
	}
	if req.Percent < 100 || req.Percent > 1000 {
		return nil, perr.New(perr.Invalid, "promo_percent_invalid", "percent is between 100 (no promo) and 1000")
	}
	p, err := s.Ingest.SetPromo(r.Context(), req.Percent, ttl)
	if err != nil {
		return nil, policyError(err, "promo_percent_invalid")
	}
	return limitsAnswer(p, s.Now()), nil
}

// policyError maps an error of changing the live limits or promo: a value the gate refuses
// is the caller's (400 with code), and anything else is the ledger's, which could not
// record them.
func policyError(err error, code string) error {
	if perr.KindOf(err) == perr.Invalid {
		return perr.Wrap(err, perr.Invalid, code, "%s", perr.As(err).Message)
	}
	return perr.Wrap(err, perr.Unavailable, "ledger_unavailable", "the ledger could not record the limits: %v", err)
}
