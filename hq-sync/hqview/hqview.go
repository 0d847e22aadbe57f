// Package hqview is HQ finance's page, served by hq-sync serve beside the stores' batches
// behind a viewer token: the stores and the days each has declared, how long ago HQ last
// stored a batch of each (the upload lag), the reconcile of a business date with its
// differences, the open exceptions per store, and, for a store's day, its transactions as
// HQ holds them beside the store's declaration. It reads HQ's database through
// hqstore.Storage only, and never writes it. The reconcile it shows is reconcile.Run, the
// nightly command's, run when the page asks (HQ keeps no reconcile results).
//
// The page's files and its message catalogs (one JSON file per language) are embedded;
// reconcile --html writes the same report as one self-contained file (report.go).
package hqview

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// MinTokenBytes is the shortest viewer token serve takes.
const MinTokenBytes = 16

// DaysShown is how many business dates, up to the one asked for, the page lists per store.
const DaysShown = 14

// Routes of the page's API (GET, viewer token).
const (
	OverviewPath = "/v1/view/overview" // ?date=YYYY-MM-DD (default: the latest date a store declared)
	TxnsPath     = "/v1/view/txns"     // ?store=S&date=YYYY-MM-DD
)

// Options configure the page.
type Options struct {
	Token  string   // the viewer token (at least MinTokenBytes)
	Stores []string // the stores of serve's stores file, listed even before HQ holds anything of them
	Now    func() time.Time
	Logger *slog.Logger
}

// Handler serves the page and its API.
type Handler struct {
	st   hqstore.Storage
	opts Options
	mux  *http.ServeMux
}

// New returns the page's handler on st. Its routes are "GET /{$}", the page's files under
// /hq/ and the API under /v1/view/.
func New(st hqstore.Storage, o Options) (*Handler, error) {
	if len(o.Token) < MinTokenBytes {
		return nil, errors.New("the viewer token needs at least 16 bytes")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Handler{st: st, opts: o, mux: http.NewServeMux()}
	h.mux.Handle("GET /{$}", pageFile("index.html", "text/html; charset=utf-8"))
	for name, ctype := range map[string]string{"hq.js": "text/javascript; charset=utf-8", "hq.css": "text/css; charset=utf-8",
		"i18n/en.json": "application/json", "i18n/zh-CN.json": "application/json"} {
		h.mux.Handle("GET /hq/"+name, pageFile(name, ctype))
	}
	h.mux.Handle("GET "+OverviewPath, h.guard(h.overview))
	h.mux.Handle("GET "+TxnsPath, h.guard(h.txns))
	return h, nil
}

// Serves reports whether a request for path is the page's (its page, files and API); serve
// hands every other request to the batches' handler.
func Serves(path string) bool {
	return path == "/" || strings.HasPrefix(path, "/hq/") || strings.HasPrefix(path, "/v1/view/")
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

//go:embed page
var page embed.FS

// pageFile serves one of the page's embedded files: it loads only its own script, style sheet
// and catalogs, and may not be framed.
func pageFile(name, ctype string) http.Handler {
	body, err := page.ReadFile("page/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", ctype)
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cache-Control", "no-cache")
		w.Write(body)
	})
}

// guard answers h's value as JSON to a request with the viewer token.
func (h *Handler) guard(fn func(*http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) != 1 {
			writeError(w, perr.New(perr.Unauthorized, "unauthorized", "send the viewer token as 'Authorization: Bearer <token>'"))
			return
		}
		v, err := fn(r)
		if err != nil {
			if perr.KindOf(err) == perr.Internal {
				h.opts.Logger.Error("hq page", "path", r.URL.Path, "err", err)
			}
			writeError(w, err)
			return
		}
		body, err := json.Marshal(v)
		if err != nil {
			writeError(w, perr.Wrap(err, perr.Internal, "internal", "answer not encoded: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	})
}

// Problem is an error answer (application/problem+json).
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func writeError(w http.ResponseWriter, err error) {
	e := perr.As(err)
	status := perr.HTTPStatus(e.Kind)
	detail := e.Message
	if e.Kind == perr.Internal {
		detail = "internal error"
	}
	body, _ := json.Marshal(Problem{Status: status, Code: e.Code, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(body)
}

// Overview is the answer of GET /v1/view/overview.
type Overview struct {
	Now  time.Time `json:"now"`
	Date string    `json:"date"` // the reconciled business date ("" while no store declared a day)
	// Dates are the business dates the stores' days are listed for, newest first.
	Dates     []string                   `json:"dates"`
	Stores    []StoreView                `json:"stores"`
	Reconcile *reconcile.Report          `json:"reconcile,omitempty"`
	Open      []reconcile.StoreException `json:"open"` // every date's open exceptions
}

// StoreView is one store on the page.
type StoreView struct {
	Store string `json:"store"`
	// LastBatchAt is when HQ stored the store's latest new batch; LagSeconds how long ago
	// (absent: HQ holds none).
	LastBatchAt *time.Time `json:"last_batch_at,omitempty"`
	LagSeconds  *int64     `json:"lag_seconds,omitempty"`
	Days        []DayView  `json:"days"` // the days of Dates it declared, newest first
	// Differences and Exceptions are the store's in the reconcile of Date; Open is its
	// open exceptions of every date.
	Differences int  `json:"differences"`
	Exceptions  int  `json:"exceptions"`
	Open        int  `json:"open"`
	Reconciled  bool `json:"reconciled"` // the store's part of Date reconciles
}

// DayView is a store's latest declaration of a day.
type DayView struct {
	Date       string    `json:"date"`
	Revision   int64     `json:"revision"`
	Txns       int       `json:"txns"`
	Amount     money.Fen `json:"amount"` // its sales less its refunds
	ReceivedAt time.Time `json:"received_at"`
	FirstAt    time.Time `json:"first_at"`
}

func (h *Handler) overview(r *http.Request) (any, error) {
	date := r.URL.Query().Get("date")
	if date != "" {
		if err := checkDate(date); err != nil {
			return nil, err
		}
	}
	return BuildOverview(r.Context(), h.st, h.opts.Stores, date, h.opts.Now())
}

// BuildOverview reads what the page shows: the stores' days up to date (or today), their
// upload lag at now, the reconcile of date (default: the latest date any store declared in
// those days) and the open exceptions. stores are listed even when HQ holds nothing of them.
func BuildOverview(ctx context.Context, st hqstore.Storage, stores []string, date string, now time.Time) (Overview, error) {
	o := Overview{Now: now, Open: []reconcile.StoreException{}}
	top := date
	if top == "" {
		top = now.AddDate(0, 0, 1).Format(wire.BusinessDate) // a store east of HQ is a day ahead
	}
	end, _ := time.Parse(wire.BusinessDate, top)
	byStore := map[string]*StoreView{}
	get := func(s string) *StoreView {
		if v := byStore[s]; v != nil {
			return v
		}
		v := &StoreView{Store: s, Days: []DayView{}}
		byStore[s] = v
		return v
	}
	for _, s := range stores {
		get(s)
	}
	for i := range DaysShown {
		d := end.AddDate(0, 0, -i).Format(wire.BusinessDate)
		o.Dates = append(o.Dates, d)
		days, err := st.Days(ctx, d, "")
		if err != nil {
			return o, perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
		}
		for _, sd := range days {
			if date == "" && o.Date == "" {
				o.Date = d
			}
			v := get(sd.Store)
			v.Days = append(v.Days, dayView(sd))
		}
	}
	if date != "" {
		o.Date = date
	}
	if err := o.lag(ctx, st, byStore, get, now); err != nil {
		return o, err
	}
	if err := o.reconcile(ctx, st, stores, get); err != nil {
		return o, err
	}
	for _, v := range byStore {
		v.Reconciled = o.Reconcile != nil && v.Differences == 0
		o.Stores = append(o.Stores, *v)
	}
	slices.SortFunc(o.Stores, func(a, b StoreView) int { return strings.Compare(a.Store, b.Store) })
	return o, nil
}

// lag fills each store's last batch and how long ago it was.
func (o *Overview) lag(ctx context.Context, st hqstore.Storage, byStore map[string]*StoreView, get func(string) *StoreView,
	now time.Time) error {
	names := make([]string, 0, len(byStore))
	for s := range byStore {
		names = append(names, s)
	}
	last, err := st.LastBatches(ctx, names)
	if err != nil {
		return perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
	}
	for s, at := range last {
		v := get(s)
		at := at
		lag := int64(max(0, now.Sub(at).Seconds()))
		v.LastBatchAt, v.LagSeconds = &at, &lag
	}
	return nil
}

// reconcile runs the reconcile of o.Date and counts each store's differences, exceptions
// and open exceptions.
func (o *Overview) reconcile(ctx context.Context, st hqstore.Storage, stores []string, get func(string) *StoreView) error {
	open, err := reconcile.RunOpen(ctx, st, "")
	if err != nil {
		return perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
	}
	o.Open = append(o.Open, open.Exceptions...)
	for _, x := range open.Exceptions {
		get(x.Store).Open++
	}
	if o.Date == "" {
		return nil
	}
	rep, err := reconcile.Run(ctx, st, o.Date, "", stores...)
	if err != nil {
		return perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
	}
	o.Reconcile = &rep
	diffs := map[string]int{}
	for _, d := range rep.Txns {
		if d.Kind != reconcile.Late {
			diffs[d.Store]++
		}
	}
	for _, d := range rep.Totals {
		diffs[d.Store]++
	}
	for _, d := range rep.Missing {
		diffs[d.Store]++
	}
	for s, n := range diffs {
		get(s).Differences = n
	}
	for _, x := range rep.Exceptions {
		get(x.Store).Exceptions++
	}
	for _, s := range append(stores, slices.Collect(maps.Keys(diffs))...) {
		get(s)
	}
	return nil
}

func dayView(sd hqstore.StoredDay) DayView {
	var amt money.Fen
	for _, t := range sd.Day.Txns {
		if t.Kind == string(wire.KindRefund) {
			amt -= t.Amount
		} else {
			amt += t.Amount
		}
	}
	return DayView{Date: sd.Day.BusinessDate, Revision: sd.Day.Revision, Txns: len(sd.Day.Txns), Amount: amt,
		ReceivedAt: sd.ReceivedAt, FirstAt: sd.FirstAt}
}

func checkDate(date string) error {
	if _, err := time.Parse(wire.BusinessDate, date); err != nil || len(date) != len(wire.BusinessDate) {
		return perr.New(perr.Invalid, "business_date_invalid", "date %q is not YYYY-MM-DD", date)
	}
	return nil
}

// Only returns the overview narrowed to one store: its row, its part of the reconcile and
// its open exceptions.
func (o Overview) Only(store string) Overview {
	o.Stores = slices.DeleteFunc(slices.Clone(o.Stores), func(v StoreView) bool { return v.Store != store })
	o.Open = slices.DeleteFunc(slices.Clone(o.Open), func(x reconcile.StoreException) bool { return x.Store != store })
	if o.Reconcile != nil {
		r := *o.Reconcile
		r.Store = store
		r.Txns = slices.DeleteFunc(slices.Clone(r.Txns), func(d reconcile.TxnDiff) bool { return d.Store != store })
		r.Totals = slices.DeleteFunc(slices.Clone(r.Totals), func(d reconcile.TotalsDiff) bool { return d.Store != store })
		r.Missing = slices.DeleteFunc(slices.Clone(r.Missing), func(d reconcile.MissingDeclaration) bool { return d.Store != store })
		r.Exceptions = slices.DeleteFunc(slices.Clone(r.Exceptions), func(x reconcile.StoreException) bool { return x.Store != store })
		r.Counts = map[string]int{}
		for _, d := range r.Txns {
			r.Counts[d.Kind]++
		}
		for _, d := range r.Missing {
			r.Counts[d.Kind]++
		}
		if len(r.Totals) > 0 {
			r.Counts[reconcile.KindTotals] = len(r.Totals)
		}
		o.Reconcile = &r
	}
	return o
}
