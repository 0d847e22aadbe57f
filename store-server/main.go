// Command store-server is a store's POS gateway: MQTT ingest from the terminals (embedded
// broker by default), the Redis Sentinel gate (live limits, atomic stock, fen counters, flow
// numbers), the SQLite ledger that judges, and the managers' local API. Run with --help.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/api"
	"github.com/posgate/posgate/store-server/broker"
	"github.com/posgate/posgate/store-server/bus"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/metrics"
	"github.com/posgate/posgate/store-server/presence"
)

func main() {
	// The store-server keeps a small heap and allocates for every message it decodes, decides
	// and commits; at the default GOGC=100 the collector took about a tenth of its CPU at
	// 5,000 live sales/s. GOGC=400 trades a few more MB for that CPU (store CPU 87.7% →
	// 85.0% over four A/B pairs; docs/benchmarks.md). An operator's GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	cli.Main("store-server", NewMain())
}

// Main is the store-server program.
type Main struct {
	Store         string
	DataDir       string
	TZ            string
	Sentinels     string
	MasterName    string
	RedisAddr     string
	RedisPassword string
	MQTTURL       string
	MQTTUsername  string
	MQTTPassword  string
	MQTTListen    string
	MQTTUsers     string
	// MQTTAnonymous lets the embedded broker admit anyone on a non-loopback address.
	MQTTAnonymous bool
	MQTTTLSCert   string
	MQTTTLSKey    string
	APIListen     string
	APITLSCert    string
	APITLSKey     string
	MetricsToken  string
	DiskWarnMB    string
	// ClockSkewWarn is how far a till's clock may be from the store's before the API,
	// dashboard, metrics and log say it is off (0: never).
	ClockSkewWarn time.Duration
	// ClockBehindConfirm is how long a till's readings must span before the store says its
	// clock is behind (presence.DefaultBehindConfirm; 0: at once).
	ClockBehindConfirm time.Duration
	APIToken           string
	CatalogFile        string
	UploadState        string
	LogLevel           string

	// Ready receives the API address and the broker URL once Run has started (for tests).
	Ready chan Addrs
}

// Addrs are where a running store-server listens.
type Addrs struct {
	API    string
	Broker string
}

// NewMain returns a Main with its defaults.
func NewMain() *Main { return &Main{Ready: make(chan Addrs, 1)} }

// ParseFlags reads flags, falling back to POSGATE_* environment variables, then defaults.
func (m *Main) ParseFlags(args []string) error {
	fs := cli.NewFlags("store-server", os.Stderr)
	str := fs.String
	str(&m.Store, "store", "POSGATE_STORE", "", "this store's id, e.g. S001 (required)")
	str(&m.DataDir, "data-dir", "POSGATE_DATA_DIR", "./data", "directory of the ledger and catalog")
	str(&m.TZ, "tz", "POSGATE_TZ", "Local", "the store's time zone (business dates), e.g. Asia/Shanghai, or a fixed offset such as UTC+08:00")
	str(&m.Sentinels, "redis-sentinels", "POSGATE_REDIS_SENTINELS", "", "comma-separated Sentinel addresses (host:port,...)")
	str(&m.MasterName, "redis-master", "POSGATE_REDIS_MASTER", "posgate", "the Sentinel master name")
	str(&m.RedisAddr, "redis-addr", "POSGATE_REDIS_ADDR", "", "a single Redis address, when not using Sentinel")
	str(&m.RedisPassword, "redis-password", "POSGATE_REDIS_PASSWORD", "", "Redis password; prefer the environment variable")
	str(&m.MQTTURL, "mqtt-url", "POSGATE_MQTT_URL", "", "an external MQTT broker (e.g. tcp://127.0.0.1:1883); empty runs the embedded broker")
	str(&m.MQTTUsername, "mqtt-username", "POSGATE_MQTT_USERNAME", "", "the store's account on the external broker (--mqtt-url), if it asks for one")
	str(&m.MQTTPassword, "mqtt-password", "POSGATE_MQTT_PASSWORD", "", "that account's password; prefer the environment variable")
	str(&m.MQTTListen, "mqtt-listen", "POSGATE_MQTT_LISTEN", "0.0.0.0:1883", "the embedded broker's listen address")
	str(&m.MQTTUsers, "mqtt-users", "POSGATE_MQTT_USERS", "", "JSON file of terminal credentials for the embedded broker ([{username,password,terminal}]); without it the broker admits anyone, and listens only on loopback unless --mqtt-allow-anonymous")
	str(&m.MQTTTLSCert, "mqtt-tls-cert", "POSGATE_MQTT_TLS_CERT", "", "PEM certificate (chain): the embedded broker speaks MQTT over TLS only (terminals use --broker tls://…); with --mqtt-tls-key")
	str(&m.MQTTTLSKey, "mqtt-tls-key", "POSGATE_MQTT_TLS_KEY", "", "PEM private key of --mqtt-tls-cert")
	fs.Bool(&m.MQTTAnonymous, "mqtt-allow-anonymous", "POSGATE_MQTT_ALLOW_ANONYMOUS", false,
		"let the embedded broker admit anyone on a non-loopback --mqtt-listen without --mqtt-users (anyone on the network can then record sales as any terminal: for a trial only)")
	str(&m.APIListen, "api-listen", "POSGATE_API_LISTEN", "127.0.0.1:8282", "the manager API's listen address")
	str(&m.APITLSCert, "api-tls-cert", "POSGATE_API_TLS_CERT", "", "PEM certificate (chain) for HTTPS on the manager API and dashboard; with --api-tls-key")
	str(&m.APITLSKey, "api-tls-key", "POSGATE_API_TLS_KEY", "", "PEM private key of --api-tls-cert")
	str(&m.MetricsToken, "metrics-token", "POSGATE_METRICS_TOKEN", "", "a bearer token for GET /metrics only (for Prometheus), besides the manager token")
	str(&m.APIToken, "api-token", "POSGATE_API_TOKEN", "", "the manager API's bearer token (required)")
	str(&m.CatalogFile, "catalog", "POSGATE_CATALOG", "", "a catalog (CSV or JSON) to import at start when the file has changed since it was last imported")
	str(&m.UploadState, "upload-state", "POSGATE_UPLOAD_STATE", "", "the hq-sync uploader's state file, for GET /v1/hq (default: upload.db in --data-dir, where hq-sync upload keeps it by default)")
	str(&m.DiskWarnMB, "disk-warn-mb", "POSGATE_DISK_WARN_MB", "1024", "below this much free room (MiB) on the ledger's disk, the API and dashboard warn (0: never)")
	fs.Duration(&m.ClockSkewWarn, "clock-skew-warn", "POSGATE_CLOCK_SKEW_WARN", presence.DefaultSkewLimit,
		"a till whose clock is further than this from the store's is flagged (its sales take their business date from it); 0: never")
	fs.Duration(&m.ClockBehindConfirm, "clock-behind-confirm", "POSGATE_CLOCK_BEHIND_CONFIRM", presence.DefaultBehindConfirm,
		"a till whose clock reads behind is flagged only once the messages saying so span this long (messages held on their way read behind); 0: at once")
	str(&m.LogLevel, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "store-server: a store's POS gateway (MQTT ingest, Redis gate, SQLite ledger, manager API).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return m.Validate()
}

// Validate checks the settings.
func (m *Main) Validate() error {
	switch {
	case !wire.ValidID(m.Store):
		return fmt.Errorf("--store %q: want 1-%d characters of A-Z a-z 0-9 _ -", m.Store, wire.MaxIDLen)
	case m.Sentinels == "" && m.RedisAddr == "":
		return errors.New("give --redis-sentinels (production) or --redis-addr")
	case m.APIToken == "":
		return errors.New("--api-token (or POSGATE_API_TOKEN) is required")
	case (m.MQTTUsername != "" || m.MQTTPassword != "") && m.MQTTURL == "":
		return errors.New("--mqtt-username and --mqtt-password are for an external broker (--mqtt-url); the embedded broker's accounts are --mqtt-users")
	case m.MQTTPassword != "" && m.MQTTUsername == "":
		return errors.New("--mqtt-password needs --mqtt-username")
	case (m.APITLSCert == "") != (m.APITLSKey == ""):
		return errors.New("--api-tls-cert and --api-tls-key go together")
	case (m.MQTTTLSCert == "") != (m.MQTTTLSKey == ""):
		return errors.New("--mqtt-tls-cert and --mqtt-tls-key go together")
	case m.MQTTTLSCert != "" && m.MQTTURL != "":
		return errors.New("--mqtt-tls-cert is for the embedded broker; an external broker (--mqtt-url) has its own")
	case m.ClockSkewWarn < 0:
		return fmt.Errorf("--clock-skew-warn %v: want a duration, 0 or more", m.ClockSkewWarn)
	case m.ClockBehindConfirm < 0:
		return fmt.Errorf("--clock-behind-confirm %v: want a duration, 0 or more", m.ClockBehindConfirm)
	case !validMB(m.DiskWarnMB):
		return fmt.Errorf("--disk-warn-mb %q: want a whole number of MiB, 0 or more", m.DiskWarnMB)
	case m.MetricsToken != "" && m.MetricsToken == m.APIToken:
		return errors.New("--metrics-token must differ from --api-token (it opens /metrics only)")
	case m.MQTTURL == "" && m.MQTTUsers == "" && !m.MQTTAnonymous && !isLoopback(m.MQTTListen):
		return fmt.Errorf("the embedded broker on %s without --mqtt-users would let anyone on the network record sales as "+
			"any terminal: give each terminal its account (--mqtt-users), or listen on loopback (--mqtt-listen 127.0.0.1:1883), "+
			"or say --mqtt-allow-anonymous for a trial", m.MQTTListen)
	}
	if _, err := wire.LoadLocation(m.TZ); err != nil {
		return fmt.Errorf("--tz: %w", err)
	}
	return nil
}

// redisClient fails fast: a gate call that cannot reach Redis should open the breaker in
// well under a second, not retry its way past the terminals' verdict deadline.
// redisClient returns the client of the store's Redis; onConnect runs on each new
// connection (gate.Gate.Connected).
func (m *Main) redisClient(onConnect func(context.Context, *redis.Conn) error) redis.UniversalClient {
	const dial, rw = 500 * time.Millisecond, time.Second
	if m.Sentinels != "" {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: m.MasterName, SentinelAddrs: strings.Split(m.Sentinels, ","), Password: m.RedisPassword,
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: 1, DialerRetries: 1,
			OnConnect: onConnect,
		})
	}
	return redis.NewClient(&redis.Options{Addr: m.RedisAddr, Password: m.RedisPassword,
		DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: 1, DialerRetries: 1, OnConnect: onConnect})
}

// Run runs the store-server until ctx ends, or until the API or ingest fails. It starts its
// parts in order, each on those before it, and stops them in the reverse order: ingest
// commits and acks the group it holds before the broker and the ledger close.
func (m *Main) Run(ctx context.Context) error {
	s := &server{log: cli.Logger(m.LogLevel).With("store", m.Store)}
	if err := m.openLedger(ctx, s); err != nil {
		return err
	}
	defer s.led.Close()
	if err := m.openCatalog(ctx, s); err != nil {
		return err
	}
	rdb := m.connectGate(s)
	defer rdb.Close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	onUp := m.newIngest(s)
	stopMQTT, err := m.startMQTT(runCtx, s, onUp)
	if err != nil {
		return err
	}
	defer stopMQTT()
	if err := m.publishCatalog(s); err != nil {
		return err
	}
	// Run returns once the catching up has: it uses the ledger, the catalog and the broker
	// Run closes. The Sentinel watcher is not waited for: it uses nothing Run closes, and a
	// Sentinel that does not answer held a shutdown back by its read timeout.
	var background sync.WaitGroup
	defer background.Wait()
	defer cancel() // before the wait (deferred calls run last first)
	m.startBackground(runCtx, s, &background)

	ln, err := m.listenAPI(s)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	srv := m.serveAPI(s, ln, errc)
	ingested := make(chan struct{})
	go func() { defer close(ingested); errc <- s.in.Run(runCtx) }()
	m.Ready <- Addrs{API: ln.Addr().String(), Broker: s.brokerURL}
	s.log.Info("store-server running", "api", ln.Addr().String(), "broker", s.brokerURL)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdown(srv, ingested)
	return err
}

// server is what Run has started so far, for its later steps.
type server struct {
	log       *slog.Logger
	led       *ledger.Ledger
	cat       *catalog.Catalog
	gate      *gate.Gate
	out       *lateOut
	met       *metrics.Metrics
	in        *ingest.Ingest
	seen      *presence.Board
	pub       publisher // the embedded broker or the client of an external one
	brokerURL string    // where the terminals reach the broker
}

// openLedger opens the ledger in --data-dir, which it makes if need be.
func (m *Main) openLedger(ctx context.Context, s *server) error {
	loc, _ := wire.LoadLocation(m.TZ)
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	led, err := ledger.Open(ctx, filepath.Join(m.DataDir, ledger.FileName), m.Store, loc)
	if err != nil {
		return err
	}
	s.led = led
	return nil
}

// openCatalog opens the catalog in --data-dir, whose versions start above those the
// terminals hold.
func (m *Main) openCatalog(ctx context.Context, s *server) error {
	cat, err := catalog.Open(catalog.DefaultPath(m.DataDir), m.Store)
	if err != nil {
		return err
	}
	cat.SetVersionFloor(func() int64 {
		v, err := s.led.CatalogVersionHeld(ctx)
		if err != nil {
			s.log.Warn("catalog versions the terminals hold", "err", err)
		}
		return v
	})
	s.cat = cat
	return nil
}

// connectGate makes the Redis client and the gate on it, and returns the client to close.
func (m *Main) connectGate(s *server) redis.UniversalClient {
	// A new connection to another Redis server than the projection's (a restart between two
	// calls, which go-redis hides) makes the gate stale until a rebuild.
	var gateOf atomic.Pointer[gate.Gate]
	rdb := m.redisClient(func(ctx context.Context, cn *redis.Conn) error {
		if g := gateOf.Load(); g != nil {
			return g.Connected(ctx, cn)
		}
		return nil
	})
	s.gate = gate.New(rdb, m.Store, gate.Options{})
	gateOf.Store(s.gate)
	return rdb
}

// newIngest makes ingest, the board of the terminals' presence and the metrics that follow
// them, and returns what takes the up messages. Ingest publishes through s.out, which
// startMQTT fills in.
func (m *Main) newIngest(s *server) (onUp func(topic string, payload []byte)) {
	s.out = &lateOut{}
	s.met = metrics.New()
	s.in = ingest.New(ingest.Config{Store: m.Store, Gate: s.gate, Ledger: s.led, Catalog: s.cat, Out: s.out, Logger: s.log, Observer: s.met})
	s.seen = presence.New(m.Store, nil, s.log)
	s.seen.SetSkewLimit(m.ClockSkewWarn)
	s.seen.SetBehindConfirm(m.ClockBehindConfirm)
	// Each up message reads its till's clock as it arrives (the board takes only those the
	// till sent as it stamped them), before ingest, which may wait for room in its queue.
	onUp = func(topic string, payload []byte) {
		s.seen.HandleUp(topic, payload)
		s.in.Handle(topic, payload)
	}
	s.met.Follow(s.in, s.led, s.seen, s.log)
	s.met.FollowUpload(m.uploadState(), s.led, s.log)
	return onUp
}

// startMQTT starts the embedded broker, which hands up messages to onUp inside the process,
// or connects to the external broker of --mqtt-url over a client connection. It returns
// what stops it.
func (m *Main) startMQTT(ctx context.Context, s *server, onUp func(topic string, payload []byte)) (stop func(), err error) {
	if m.MQTTURL == "" {
		stop, err = m.startBroker(s, onUp)
	} else {
		stop, err = m.connectBus(ctx, s, onUp)
	}
	if err != nil {
		return nil, err
	}
	s.out.p = s.pub // before in.Run: only Run publishes
	return stop, nil
}

// startBroker starts the embedded broker. What it returns stops ingest's Handle and then
// closes the broker.
func (m *Main) startBroker(s *server, onUp func(topic string, payload []byte)) (stop func(), err error) {
	var users []broker.User
	if m.MQTTUsers != "" {
		if users, err = broker.LoadUsers(m.MQTTUsers); err != nil {
			return nil, err
		}
	}
	var tlsCfg *tls.Config
	if m.MQTTTLSCert != "" {
		// Loaded before serving: a wrong file stops the start instead of every handshake.
		// A renewal replacing the files later is taken without a restart.
		pair, err := certfile.Load(m.MQTTTLSCert, m.MQTTTLSKey, certfile.Options{Every: certCheckEvery, Name: "mqtt", Logger: s.log})
		if err != nil {
			return nil, fmt.Errorf("--mqtt-tls-cert: %w", err)
		}
		tlsCfg = pair.TLSConfig()
		s.met.FollowCert("mqtt", pair.NotAfter)
	}
	b, err := broker.Start(broker.Config{Addr: m.MQTTListen, TLS: tlsCfg, Store: m.Store, Users: users,
		OnUp: onUp, OnStatus: s.seen.Handle, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.pub = b
	s.brokerURL = "tcp://" + loopback(b.Addr())
	if tlsCfg != nil {
		s.brokerURL = "tls://" + loopback(b.Addr())
	}
	s.log.Info("embedded MQTT broker", "addr", b.Addr())
	return func() {
		s.in.Stop() // before b.Close: a connection blocked in Handle must be let go
		b.Close()
	}, nil
}

// connectBus connects to the external broker of --mqtt-url. What it returns closes the
// connection.
func (m *Main) connectBus(ctx context.Context, s *server, onUp func(topic string, payload []byte)) (stop func(), err error) {
	var connected atomic.Pointer[bus.Client]
	republish := func() { // the catalog again on each reconnection (not the first: publishCatalog)
		if c := connected.Load(); c != nil {
			if err := s.cat.Publish(c); err != nil {
				s.log.Warn("publish catalog", "err", err)
			}
		}
	}
	client, err := bus.Connect(ctx, bus.Config{URL: m.MQTTURL, Store: m.Store, Username: m.MQTTUsername,
		Password: m.MQTTPassword, OnUp: onUp, OnStatus: s.seen.Handle, OnConnected: republish, Logger: s.log})
	if err != nil {
		return nil, err
	}
	connected.Store(client)
	s.pub, s.brokerURL = client, m.MQTTURL
	return func() { client.Close() }, nil
}

// publishCatalog imports --catalog, if given, and sends the store's catalog to the terminals.
func (m *Main) publishCatalog(s *server) error {
	if m.CatalogFile != "" {
		if err := m.importCatalog(s.cat, s.pub, s.log); err != nil {
			return err
		}
	}
	if err := s.cat.Publish(s.pub); err != nil {
		s.log.Warn("publish catalog", "err", err)
	}
	return nil
}

// startBackground starts the catalog's catching up with the terminals, which background
// waits for, and the watch of the Sentinels for failovers, which nothing waits for.
func (m *Main) startBackground(ctx context.Context, s *server, background *sync.WaitGroup) {
	background.Go(func() { m.catchUpCatalog(ctx, s.cat, s.led, s.pub, s.log) })
	if m.Sentinels != "" {
		go watchFailover(ctx, strings.Split(m.Sentinels, ","), m.MasterName, m.RedisPassword, s.in.Rebuild, s.log)
	}
}

// listenAPI opens the manager API's listener, over TLS with --api-tls-cert.
func (m *Main) listenAPI(s *server) (net.Listener, error) {
	ln, err := net.Listen("tcp", m.APIListen)
	if err != nil {
		return nil, fmt.Errorf("api listen: %w", err)
	}
	if m.APITLSCert != "" {
		// Loaded before serving: a wrong file stops the start instead of every handshake.
		// A renewal replacing the files later is taken without a restart.
		pair, err := certfile.Load(m.APITLSCert, m.APITLSKey, certfile.Options{Every: certCheckEvery, Name: "api", Logger: s.log})
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("api tls: %w", err)
		}
		ln = tls.NewListener(ln, pair.TLSConfig())
		s.met.FollowCert("api", pair.NotAfter)
	}
	return ln, nil
}

// serveAPI serves the manager API, dashboard and metrics on ln; a failure of the server goes
// to errc.
func (m *Main) serveAPI(s *server, ln net.Listener, errc chan<- error) *http.Server {
	srv := &http.Server{Handler: (&api.Server{Token: m.APIToken, Store: m.Store, Ledger: s.led, Gate: s.gate, Ingest: s.in,
		Catalog: s.cat, Pub: s.pub, Presence: s.seen, Metrics: s.met.Handler(), MetricsToken: m.MetricsToken, DiskWarnBytes: m.diskWarnBytes(), UploadState: m.uploadState(), Logger: s.log}).Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	return srv
}

// shutdown shuts the API down, then waits for ingest to return. Ingest commits and acks the
// group it holds before the broker and the ledger close (Run's deferred calls): stopping
// with a group half-way logged commit errors, and its acks were lost (the terminals sent
// the events again).
func shutdown(srv *http.Server, ingested <-chan struct{}) {
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shut)
	<-ingested
}

func validMB(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= 0 && n < 1<<40
}

// diskWarnBytes is --disk-warn-mb in bytes (checked by Validate).
func (m *Main) diskWarnBytes() int64 {
	n, _ := strconv.ParseInt(m.DiskWarnMB, 10, 64)
	return n << 20
}

// uploadState is where the store's uploader keeps its state.
func (m *Main) uploadState() string {
	if m.UploadState != "" {
		return m.UploadState
	}
	return filepath.Join(m.DataDir, "upload.db")
}

// importCatalog imports --catalog when the file has changed since it was last imported. A
// file that cannot be imported stops the start only while the store has no catalog at all:
// otherwise the store goes on selling on the one it has, and says so.
func (m *Main) importCatalog(cat *catalog.Catalog, pub catalog.Publisher, log *slog.Logger) error {
	result, err := cat.ImportSource(m.CatalogFile, pub)
	cur := cat.Current()
	switch {
	case err != nil && cur.Version == 0:
		return fmt.Errorf("catalog %s: %w", m.CatalogFile, err)
	case err != nil:
		log.Error("the --catalog file cannot be imported; the store keeps its catalog", "file", m.CatalogFile,
			"version", cur.Version, "err", err)
	case result == catalog.SourceImported:
		log.Info("catalog imported", "file", m.CatalogFile, "version", cur.Version, "items", len(cur.Items))
	case result == catalog.SourceKept:
		log.Warn("the --catalog file differs from the store's catalog, which may hold imports made through the API "+
			"since; the store keeps its catalog, and imports the file once it changes", "file", m.CatalogFile,
			"version", cur.Version)
	}
	return nil
}

// certCheckEvery is the least time between two looks at the files of a listener's TLS
// certificate, on a handshake or a metrics scrape: a renewal is served within it.
var certCheckEvery = certfile.DefaultEvery

// catalogCheckEvery is how often the store looks for terminals holding a catalog version
// above its own.
var catalogCheckEvery = 30 * time.Second

// catalogCatchUpGap is the least time between two issues of the catalog catching up with the
// terminals.
var catalogCatchUpGap = 10 * time.Minute

// catchUpCatalog issues the store's catalog again, under a version above theirs, when
// terminals report holding a higher version than the store's: its data directory was
// restored from an older backup, or made anew, and the terminals ignore every version at or
// below the one they hold. Without it they sold at the old prices until the manager noticed
// (catalog_ahead) and imported again.
func (m *Main) catchUpCatalog(ctx context.Context, cat *catalog.Catalog, led *ledger.Ledger, pub catalog.Publisher, log *slog.Logger) {
	tick := time.NewTicker(catalogCheckEvery)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// At most one catching up per catalogCatchUpGap: a terminal that keeps reporting a
		// higher version (faulty, or hostile) would have the store send its whole catalog to
		// every till each time.
		if !last.IsZero() && time.Since(last) < catalogCatchUpGap {
			continue
		}
		held, err := led.CatalogVersionHeld(ctx)
		if err != nil {
			continue
		}
		was := cat.Current().Version
		next, issued, err := cat.Reissue(held, pub)
		var np *catalog.NotPublishedError
		switch {
		case !issued:
			continue
		case err != nil && !errors.As(err, &np):
			log.Error("terminals hold a newer catalog version than the store; issuing the store's again failed",
				"store_version", was, "held", held, "err", err)
			continue
		}
		last = time.Now()
		log.Warn("terminals held a newer catalog version than the store (its data restored or made anew); "+
			"the store's catalog is issued again above it", "was", was, "held", held, "now", next.Version)
	}
}

// isLoopback reports whether a listen address takes connections from this machine alone.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopback turns a wildcard listen address into one a local client can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1:" + port
	}
	return addr
}

// publisher is what the store-server sends through: the embedded broker or a client of an
// external one.
type publisher interface {
	ingest.Publisher
	catalog.Publisher
}

// lateOut lets ingest exist (and queue messages) before what it publishes through.
type lateOut struct{ p publisher }

func (o *lateOut) Publish(topic string, payload []byte) error { return o.p.Publish(topic, payload) }
