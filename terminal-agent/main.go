// Command terminal-agent runs on a POS device: a localhost HTTP API for the POS app, a durable
// SQLite outbox, and the MQTT sync lane to the store. Run with --help for every setting; each
// flag can also be set by the environment variable named in its help.
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	_ "time/tzdata" // the zone database, for devices that have none (Windows, Android)

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/clock"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "service" {
		os.Exit(serviceMain(os.Args[2:])) // service_windows.go
	}
	if len(os.Args) > 1 && os.Args[1] == "catalog-key" {
		os.Exit(catalogKeyCommand(os.Args[2:])) // catalogkey.go
	}
	cli.Main("terminal-agent", NewMain())
}

// Main is the terminal-agent program.
type Main struct {
	Store, Terminal    string
	Broker             string
	BrokerCA           string
	Username, Password string
	DataDir            string
	Listen             string
	TZ                 string
	CardPaymentCap     string
	CardTotalCap       string
	MaxOffline         time.Duration
	VerdictTimeout     time.Duration
	AckTimeout         time.Duration
	Window, Batch      int
	Retention          time.Duration
	RetentionMax       time.Duration
	CloseLookbackDays  int
	Heartbeat          time.Duration
	BacklogEvery       time.Duration
	StoreKey           string
	LogLevel           string
	apiFlags
	LogFile string
	// ClockOffsetFile names the fault tests' clock offset (internal/clock).
	ClockOffsetFile string

	// Addr is the address the API listens on once Run has started (for tests).
	Addr chan string
}

// NewMain returns a Main with its defaults.
func NewMain() *Main { return &Main{Addr: make(chan string, 1)} }

// ParseFlags reads flags, falling back to POSGATE_* environment variables, then defaults.
func (m *Main) ParseFlags(args []string) error {
	fs := cli.NewFlags("terminal-agent", os.Stderr)
	str, dur := fs.String, fs.Duration
	str(&m.Store, "store", "POSGATE_STORE", "", "store id, e.g. S001 (required)")
	str(&m.Terminal, "terminal", "POSGATE_TERMINAL", "", "this terminal's id, e.g. T01 (required)")
	str(&m.Broker, "broker", "POSGATE_BROKER", "tcp://127.0.0.1:1883", "the store's MQTT broker URL")
	str(&m.BrokerCA, "broker-ca", "POSGATE_BROKER_CA", "", "PEM certificate(s) to trust for a tls:// broker (the store's own certificate or its authority); empty: the system's")
	str(&m.Username, "username", "POSGATE_MQTT_USERNAME", "", "MQTT user name (the terminal's own credentials)")
	fs.Secret(&m.Password, "password", "POSGATE_MQTT_PASSWORD", 1, "the MQTT password of --username")
	str(&m.DataDir, "data-dir", "POSGATE_DATA_DIR", defaultDataDir(), "directory of the outbox database")
	str(&m.Listen, "listen", "POSGATE_LISTEN", "127.0.0.1:8181", "address of the local API for the POS app (keep it on localhost)")
	str(&m.TZ, "tz", "POSGATE_TZ", "Local", "the store's time zone (business dates), e.g. Asia/Shanghai, or a fixed offset such as UTC+08:00")
	str(&m.CardPaymentCap, "offline-card-payment-max", "POSGATE_OFFLINE_CARD_PAYMENT_MAX", "2000.00",
		"offline: largest single card/QR payment, decimal yuan (0: no limit)")
	str(&m.CardTotalCap, "offline-card-total-max", "POSGATE_OFFLINE_CARD_TOTAL_MAX", "20000.00",
		"offline: most card/QR money waiting to sync, decimal yuan (0: no limit)")
	dur(&m.MaxOffline, "offline-max", "POSGATE_OFFLINE_MAX", 24*time.Hour,
		"longest time offline during which card/QR payments are still taken (0: no limit); cash is never capped")
	dur(&m.VerdictTimeout, "verdict-timeout", "POSGATE_VERDICT_TIMEOUT", 300*time.Millisecond,
		"online, how long a scan or checkout waits for the store's verdict before deciding locally")
	dur(&m.AckTimeout, "ack-timeout", "POSGATE_ACK_TIMEOUT", 5*time.Second, "resend unacked events after this long")
	fs.Int(&m.Window, "window", "POSGATE_WINDOW", 2000, "most events published and not yet acked")
	fs.Int(&m.Batch, "batch", "POSGATE_BATCH", 250, "most events in one MQTT message when draining a backlog")
	dur(&m.Retention, "retention", "POSGATE_RETENTION", 7*24*time.Hour, "keep acked events, and the answers of requests (Idempotency-Key), at least this long by the clock, and an acked event also until HQ holds its business day (the store says which); unacked events are never pruned, and an answer also stays until 10,000 later requests (the clock may jump)")
	dur(&m.RetentionMax, "retention-max", "POSGATE_RETENTION_MAX", outbox.DefaultKeepUnheld, "keep an acked event whose business day HQ does not hold at most this long (the outbox's bound when the store's uploader does not run)")
	fs.Int(&m.CloseLookbackDays, "day-close-lookback", "POSGATE_DAY_CLOSE_LOOKBACK", outbox.DefaultCloseLookbackDays,
		"a day close naming no day looks this many days back for the open business day; older open days are listed in status and closed by name")
	dur(&m.Heartbeat, "heartbeat", "POSGATE_HEARTBEAT", time.Minute, "queue a heartbeat event this often while online (0: off)")
	dur(&m.BacklogEvery, "backlog-every", "POSGATE_BACKLOG_EVERY", 2*time.Second, "while online, publish the backlog to the store this often when it changed, at most 30s (0: off)")
	str(&m.StoreKey, "store-key", "POSGATE_STORE_KEY", "",
		"the store's public catalog key (its data directory's catalog-key.pub), pinned when first given or changed; the pin then follows the store's signed key rotations (terminal-agent catalog-key reset replaces it); empty: the key of the first signed catalog received is pinned")
	m.apiFlags.define(fs)
	str(&m.ClockOffsetFile, "clock-offset-file", "POSGATE_CLOCK_OFFSET_FILE", "",
		"for fault tests: a file holding a signed duration (+25m, -3h) the agent adds to the system clock for everything it dates and times, read again about once a second (absent: none); leave it empty on a till")
	str(&m.LogLevel, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&m.LogFile, "log-file", "POSGATE_LOG_FILE", "", "write the log to this file, rotated at 10 MB, 5 old files kept for 30 days (empty: stderr; the Windows service writes to logs\\terminal-agent.log in --data-dir)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "terminal-agent: the POS device's offline-first gateway to its store.\n\n")
		fmt.Fprintf(fs.Output(), "It serves the POS app on a localhost HTTP API (docs/terminal-api.md), writes every sale,\n")
		fmt.Fprintf(fs.Output(), "payment and refund to SQLite before answering, and syncs them to the store over MQTT.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return m.Validate()
}

// tlsBroker reports whether the broker URL is one paho opens with TLS.
func tlsBroker(u string) bool {
	scheme, _, _ := strings.Cut(u, "://")
	switch scheme {
	case "tls", "ssl", "mqtts", "tcps":
		return true
	}
	return false
}

// Validate checks the settings.
func (m *Main) Validate() error {
	switch {
	case !wire.ValidID(m.Store):
		return fmt.Errorf("--store %q: want 1-%d characters of A-Z a-z 0-9 _ -", m.Store, wire.MaxIDLen)
	case !wire.ValidID(m.Terminal):
		return fmt.Errorf("--terminal %q: want 1-%d characters of A-Z a-z 0-9 _ -", m.Terminal, wire.MaxIDLen)
	case m.DataDir == "":
		return errors.New("--data-dir is required")
	case m.BrokerCA != "" && !tlsBroker(m.Broker):
		return fmt.Errorf("--broker-ca is for a tls:// broker, not %s", m.Broker)
	case m.CloseLookbackDays < 1:
		// 0 would leave yesterday out: a close pressed just after midnight found nothing.
		return fmt.Errorf("--day-close-lookback %d: want at least 1 day", m.CloseLookbackDays)
	}
	if err := m.apiFlags.validate(m.Listen); err != nil {
		return err
	}
	if _, err := wire.LoadLocation(m.TZ); err != nil {
		return fmt.Errorf("--tz: %w", err)
	}
	for _, s := range []string{m.CardPaymentCap, m.CardTotalCap} {
		if _, err := money.ParseNonNegative(s); err != nil {
			return fmt.Errorf("offline cap: %w", err)
		}
	}
	return nil
}

// logger returns the agent's logger: on stderr, or on the rotating --log-file, which the
// returned closer closes.
func (m *Main) logger() (*slog.Logger, io.Closer) {
	var w io.WriteCloser = nopCloser{os.Stderr}
	if m.LogFile != "" {
		w = &lumberjack.Logger{Filename: m.LogFile, MaxSize: 10, MaxBackups: 5, MaxAge: 30}
	}
	return cli.LoggerTo(w, m.LogLevel).With("store", m.Store, "terminal", m.Terminal), w
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Run runs the agent until ctx ends, then stops taking requests and closes the outbox.
func (m *Main) Run(ctx context.Context) (err error) {
	log, logClose := m.logger()
	defer logClose.Close()
	slog.SetDefault(log)
	defer func() {
		if err != nil {
			log.Error("stopped", "err", err)
		} else {
			log.Info("stopped: outbox closed")
		}
	}()
	loc, _ := wire.LoadLocation(m.TZ)
	// One clock for everything the agent dates and keeps by time (internal/clock).
	clk := clock.New(m.ClockOffsetFile, log)
	if m.ClockOffsetFile != "" {
		log.Warn("clock offset file set: for fault tests only", "file", m.ClockOffsetFile, "offset", clk.Offset())
	}
	payCap, _ := money.ParseNonNegative(m.CardPaymentCap)
	totalCap, _ := money.ParseNonNegative(m.CardTotalCap)
	if err := private.Dir(m.DataDir, log); err != nil {
		return err
	}
	store, err := outbox.Open(ctx, filepath.Join(m.DataDir, "outbox.db"), outbox.Config{
		Store: m.Store, Terminal: m.Terminal, Location: loc, Now: clk.Now,
		Caps:              outbox.Caps{MaxCardPayment: payCap, MaxStoredCard: totalCap, MaxOffline: m.MaxOffline},
		CloseLookbackDays: m.CloseLookbackDays, KeepUnheld: m.RetentionMax, Logger: log,
	})
	if err != nil {
		return err
	}
	defer store.Close()
	var tlsCfg *tls.Config
	if m.BrokerCA != "" {
		pem, err := os.ReadFile(m.BrokerCA)
		if err != nil {
			return fmt.Errorf("--broker-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--broker-ca %s: no PEM certificate in it", m.BrokerCA)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var storeKey ed25519.PublicKey
	if m.StoreKey != "" {
		b, err := os.ReadFile(m.StoreKey)
		if err != nil {
			return fmt.Errorf("--store-key: %w", err)
		}
		if storeKey, err = wire.ParseStoreKey(b); err != nil {
			return fmt.Errorf("--store-key %s: %w", m.StoreKey, err)
		}
	}
	up := uplink.New(uplink.Config{
		BrokerURL: m.Broker, TLS: tlsCfg, Store: m.Store, Terminal: m.Terminal, Username: m.Username, Password: m.Password,
		Window: m.Window, BatchMax: m.Batch, AckTimeout: m.AckTimeout, VerdictTimeout: m.VerdictTimeout,
		HeartbeatEvery: m.Heartbeat, BacklogEvery: m.BacklogEvery, StoreKey: storeKey, Logger: log, Now: clk.Now,
	}, store)

	acc, err := m.apiFlags.access(m.DataDir, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", m.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	tl, err := m.apiFlags.listener(ln, log)
	if err != nil {
		ln.Close()
		return err
	}
	ln = tl
	m.Addr <- ln.Addr().String()
	srv := &http.Server{Handler: api.New(store, up, log, acc), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	log.Info("listening", "addr", ln.Addr().String(), "broker", m.Broker)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- up.Run(ctx) }()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go m.pruneLoop(ctx, store, clk, log)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shut)
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		return err
	}
	return nil
}

func (m *Main) pruneLoop(ctx context.Context, store *outbox.Store, clk *clock.Clock, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := store.Prune(ctx, clk.Now().Add(-m.Retention)); err != nil {
			if ctx.Err() == nil {
				log.Error("prune", "err", err)
			}
		} else if n > 0 {
			log.Info("pruned acked events", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
