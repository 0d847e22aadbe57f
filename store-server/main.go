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

// Run runs the store-server until ctx ends.
func (m *Main) Run(ctx context.Context) error {
	log := cli.Logger(m.LogLevel).With("store", m.Store)
	loc, _ := wire.LoadLocation(m.TZ)
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	led, err := ledger.Open(ctx, filepath.Join(m.DataDir, ledger.FileName), m.Store, loc)
	if err != nil {
		return err
	}
	defer led.Close()
	cat, err := catalog.Open(catalog.DefaultPath(m.DataDir), m.Store)
	if err != nil {
		return err
	}
	cat.SetVersionFloor(func() int64 {
		v, err := led.CatalogVersionHeld(ctx)
		if err != nil {
			log.Warn("catalog versions the terminals hold", "err", err)
		}
		return v
	})
	// A new connection to another Redis server than the projection's (a restart between two
	// calls, which go-redis hides) makes the gate stale until a rebuild.
	var gateOf atomic.Pointer[gate.Gate]
	rdb := m.redisClient(func(ctx context.Context, cn *redis.Conn) error {
		if g := gateOf.Load(); g != nil {
			return g.Connected(ctx, cn)
		}
		return nil
	})
	defer rdb.Close()
	g := gate.New(rdb, m.Store, gate.Options{})
	gateOf.Store(g)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &lateOut{}
	met := metrics.New()
	in := ingest.New(ingest.Config{Store: m.Store, Gate: g, Ledger: led, Catalog: cat, Out: out, Logger: log, Observer: met})
	seen := presence.New(m.Store, nil, log)
	seen.SetSkewLimit(m.ClockSkewWarn)
	seen.SetBehindConfirm(m.ClockBehindConfirm)
	// Each up message reads its till's clock as it arrives (the board takes only those the
	// till sent as it stamped them), before ingest, which may wait for room in its queue.
	onUp := func(topic string, payload []byte) {
		seen.HandleUp(topic, payload)
		in.Handle(topic, payload)
	}
	met.Follow(in, led, seen, log)
	met.FollowUpload(m.uploadState(), led, log)
	// The embedded broker hands up messages to ingest inside the process; an external broker
	// is reached over a client connection.
	var pub publisher
	brokerURL := m.MQTTURL
	if brokerURL == "" {
		var users []broker.User
		if m.MQTTUsers != "" {
			if users, err = broker.LoadUsers(m.MQTTUsers); err != nil {
				return err
			}
		}
		var tlsCfg *tls.Config
		if m.MQTTTLSCert != "" {
			// Loaded before serving: a wrong file stops the start instead of every handshake.
			// A renewal replacing the files later is taken without a restart.
			pair, err := certfile.Load(m.MQTTTLSCert, m.MQTTTLSKey, certfile.Options{Every: certCheckEvery, Name: "mqtt", Logger: log})
			if err != nil {
				return fmt.Errorf("--mqtt-tls-cert: %w", err)
			}
			tlsCfg = pair.TLSConfig()
			met.FollowCert("mqtt", pair.NotAfter)
		}
		b, err := broker.Start(broker.Config{Addr: m.MQTTListen, TLS: tlsCfg, Store: m.Store, Users: users,
			OnUp: onUp, OnStatus: seen.Handle, Logger: log})
		if err != nil {
			return err
		}
		defer b.Close()
		defer in.Stop() // before b.Close: a connection blocked in Handle must be let go
		pub = b
		brokerURL = "tcp://" + loopback(b.Addr())
		if tlsCfg != nil {
			brokerURL = "tls://" + loopback(b.Addr())
		}
		log.Info("embedded MQTT broker", "addr", b.Addr())
	} else {
		var connected atomic.Pointer[bus.Client]
		republish := func() { // the catalog again on each reconnection (not the first: below)
			if c := connected.Load(); c != nil {
				if err := cat.Publish(c); err != nil {
					log.Warn("publish catalog", "err", err)
				}
			}
		}
		client, err := bus.Connect(runCtx, bus.Config{URL: brokerURL, Store: m.Store, Username: m.MQTTUsername,
			Password: m.MQTTPassword, OnUp: onUp, OnStatus: seen.Handle, OnConnected: republish, Logger: log})
		if err != nil {
			return err
		}
		defer client.Close()
		connected.Store(client)
		pub = client
	}
	out.p = pub // before in.Run: only Run publishes

	if m.CatalogFile != "" {
		if err := m.importCatalog(cat, pub, log); err != nil {
			return err
		}
	}
	if err := cat.Publish(pub); err != nil {
		log.Warn("publish catalog", "err", err)
	}
	// Run returns once the catching up has: it uses the ledger, the catalog and the broker
	// Run closes. The Sentinel watcher is not waited for: it uses nothing Run closes, and a
	// Sentinel that does not answer held a shutdown back by its read timeout.
	var background sync.WaitGroup
	defer background.Wait()
	defer cancel() // before the wait (deferred calls run last first)
	background.Go(func() { m.catchUpCatalog(runCtx, cat, led, pub, log) })
	if m.Sentinels != "" {
		go watchFailover(runCtx, strings.Split(m.Sentinels, ","), m.MasterName, m.RedisPassword, in.Rebuild, log)
	}

	ln, err := net.Listen("tcp", m.APIListen)
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	if m.APITLSCert != "" {
		// Loaded before serving: a wrong file stops the start instead of every handshake.
		// A renewal replacing the files later is taken without a restart.
		pair, err := certfile.Load(m.APITLSCert, m.APITLSKey, certfile.Options{Every: certCheckEvery, Name: "api", Logger: log})
		if err != nil {
			ln.Close()
			return fmt.Errorf("api tls: %w", err)
		}
		ln = tls.NewListener(ln, pair.TLSConfig())
		met.FollowCert("api", pair.NotAfter)
	}
	srv := &http.Server{Handler: (&api.Server{Token: m.APIToken, Store: m.Store, Ledger: led, Gate: g, Ingest: in,
		Catalog: cat, Pub: pub, Presence: seen, Metrics: met.Handler(), MetricsToken: m.MetricsToken, DiskWarnBytes: m.diskWarnBytes(), UploadState: m.uploadState(), Logger: log}).Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	ingested := make(chan struct{})
	go func() { defer close(ingested); errc <- in.Run(runCtx) }()
	m.Ready <- Addrs{API: ln.Addr().String(), Broker: brokerURL}
	log.Info("store-server running", "api", ln.Addr().String(), "broker", brokerURL)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	srv.Shutdown(shut)
	// Ingest commits and acks the group it holds before the broker and the ledger close
	// (deferred above): stopping with a group half-way logged commit errors, and its acks
	// were lost (the terminals sent the events again).
	<-ingested
	return err
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
