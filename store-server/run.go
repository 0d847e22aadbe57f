package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/httpserve"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/refusals"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/api"
	"github.com/posgate/posgate/store-server/broker"
	"github.com/posgate/posgate/store-server/bus"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/enrol"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/history"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/metrics"
	"github.com/posgate/posgate/store-server/presence"
	"github.com/posgate/posgate/store-server/settings"
)

// Run runs the store-server until ctx ends, or until the API or ingest fails. It starts its
// parts in order, each on those before it, and stops them in the reverse order: ingest
// commits and acks the group it holds before the broker and the ledger close.
func (m *Main) Run(ctx context.Context) error {
	s := &server{log: cli.Logger(m.LogLevel).With("store", m.Store)}
	m.warnInsecure(s.log)
	if err := m.openLedger(ctx, s); err != nil {
		return err
	}
	defer s.led.Close()
	if err := m.openCatalog(ctx, s); err != nil {
		return err
	}
	if err := m.enrolTerminals(s); err != nil {
		return err
	}
	rdb := m.connectGate(s)
	defer rdb.Close()
	s.rdb = rdb

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	onUp := s.enrolled.Up(m.newIngest(s))
	s.met.Register(s.book)
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
	srv := m.serveAPI(runCtx, s, ln, errc, &background)
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
	set       *settings.Settings
	gate      *gate.Gate
	rdb       redis.UniversalClient
	out       *lateOut
	met       *metrics.Metrics
	hist      *history.Recorder
	in        *ingest.Ingest
	seen      *presence.Board
	pub       publisher // the embedded broker or the client of an external one
	book      *refusals.Book
	enrolled  *enrol.List
	tokens    []api.RoleToken // --api-tokens
	brokerURL string          // where the terminals reach the broker
}

// openLedger opens the ledger in --data-dir, which it makes if need be.
func (m *Main) openLedger(ctx context.Context, s *server) error {
	loc, _ := wire.LoadLocation(m.TZ)
	if err := private.Dir(m.DataDir, slog.Default()); err != nil {
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
	// The terminals take only catalogs signed by the key they pinned (docs/security.md).
	// A key rotated (store-server catalog-key rotate) signs its catalogs with the newest key,
	// and the chain of rotations goes out before them.
	sg, err := catalog.LoadSigner(m.DataDir, m.Store)
	if err != nil {
		return err
	}
	cat.SetSigner(sg.Key)
	cat.SetRotations(sg.Rotations)
	s.log.Info("catalogs are signed", "key", wire.KeyID(sg.Key.Public().(ed25519.PublicKey)),
		"public_key_file", filepath.Join(m.DataDir, catalog.PubKeyFile), "rotations", len(sg.Rotations.Rotations))
	if s.set, err = settings.Open(settings.DefaultPath(m.DataDir), m.Store); err != nil {
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

// redisClient returns the client of the store's Redis (Sentinel, a Redis Cluster, or one
// address); onConnect runs on each new connection (gate.Gate.Connected), on a cluster only
// on a connection to the master of the store's slot. It fails fast: a gate call that cannot
// reach Redis should open the breaker in well under a second, not retry its way past the
// terminals' verdict deadline.
func (m *Main) redisClient(onConnect func(context.Context, *redis.Conn) error) redis.UniversalClient {
	const dial, rw = 500 * time.Millisecond, time.Second
	if m.Cluster != "" {
		key := slotKey(m.Store)
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: strings.Split(m.Cluster, ","), Password: m.RedisPassword, TLSConfig: m.redisTLS,
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: 1, DialerRetries: 1,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error {
				if ours, err := servesSlotOf(ctx, cn, key); err != nil || !ours {
					return nil // another node, or one that cannot say: the next command tells
				}
				return onConnect(ctx, cn)
			},
		})
	}
	if m.Sentinels != "" {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: m.MasterName, SentinelAddrs: strings.Split(m.Sentinels, ","), Password: m.RedisPassword,
			SentinelPassword: m.SentinelPassword, TLSConfig: m.redisTLS,
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: 1, DialerRetries: 1,
			OnConnect: onConnect,
		})
	}
	return redis.NewClient(&redis.Options{Addr: m.RedisAddr, Password: m.RedisPassword, TLSConfig: m.redisTLS,
		DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: 1, DialerRetries: 1, OnConnect: onConnect})
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
	var c gate.Client = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		c = clusterGate{ClusterClient: cc, key: slotKey(m.Store)}
	}
	s.gate = gate.New(c, m.Store, gate.Options{IdemTTL: m.RedisIdemTTL})
	gateOf.Store(s.gate)
	return rdb
}

// newIngest makes ingest, the board of the terminals' presence and the metrics that follow
// them, and returns what takes the up messages. Ingest publishes through s.out, which
// startMQTT fills in.
func (m *Main) newIngest(s *server) (onUp func(topic string, payload []byte)) {
	s.out = &lateOut{}
	s.met = metrics.New()
	audit := m.AuditEvery
	if audit == 0 {
		audit = -1 // ingest: no schedule
	}
	s.hist = history.New(m.ChartEvery)
	s.in = ingest.New(ingest.Config{Store: m.Store, Gate: s.gate, Ledger: s.led, Catalog: s.cat, Out: s.out, Logger: s.log,
		Observer: observers{s.met, s.hist}, AuditEvery: audit})
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
	s.out.p = refusals.Acks{P: s.pub, Book: s.book} // before in.Run: only Run publishes
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
	b, err := broker.Start(broker.Config{Addr: m.MQTTListen, TLS: tlsCfg, Store: m.Store, Users: users, Refusals: s.book,
		OnUp: onUp, OnStatus: s.enrolled.Status(s.seen.Handle), Logger: s.log})
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
	republish := func() { // the catalog and settings again on each reconnection (not the first: publishCatalog)
		if c := connected.Load(); c != nil {
			if err := s.cat.Publish(c); err != nil {
				s.log.Warn("publish catalog", "err", err)
			}
			if err := s.set.Publish(c); err != nil {
				s.log.Warn("publish settings", "err", err)
			}
		}
	}
	client, err := bus.Connect(ctx, bus.Config{URL: m.MQTTURL, Store: m.Store, Username: m.MQTTUsername,
		Password: m.MQTTPassword, OnUp: onUp, OnStatus: s.enrolled.Status(s.seen.Handle), OnConnected: republish, Logger: s.log})
	if err != nil {
		return nil, err
	}
	connected.Store(client)
	s.pub, s.brokerURL = client, m.MQTTURL
	return func() { client.Close() }, nil
}

// loopback turns a wildcard listen address into one a local client can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1:" + port
	}
	return addr
}

// publishCatalog imports --catalog, if given, and sends the store's catalog and settings to
// the terminals.
func (m *Main) publishCatalog(s *server) error {
	if m.CatalogFile != "" {
		if err := m.importCatalog(s.cat, s.pub, s.log); err != nil {
			return err
		}
	}
	if err := s.cat.Publish(s.pub); err != nil {
		s.log.Warn("publish catalog", "err", err)
	}
	if err := s.set.Publish(s.pub); err != nil {
		s.log.Warn("publish settings", "err", err)
	}
	return nil
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

// startBackground starts the catalog's catching up with the terminals and the sweep of
// closed days out of Redis, which background waits for, and the watch of the Sentinels
// (or of the cluster) for failovers, which nothing waits for.
func (m *Main) startBackground(ctx context.Context, s *server, background *sync.WaitGroup) {
	background.Go(func() { m.catchUpCatalog(ctx, s.cat, s.led, s.pub, s.log) })
	if m.RedisSweepEvery > 0 {
		sweep := &daySweep{led: s.led, gate: s.gate, state: m.uploadState(), keep: m.keepDays, log: s.log}
		background.Go(func() { sweep.run(ctx, m.RedisSweepEvery) })
	}
	hq := &hqHeld{led: s.led, state: m.uploadState(), store: m.Store, pub: s.pub, log: s.log}
	every := hqHeldEvery
	if m.RedisSweepEvery > 0 { // both read the uploader's state: at the same pace
		every = m.RedisSweepEvery
	}
	background.Go(func() { hq.run(ctx, every) })
	if m.Sentinels != "" {
		go watchFailover(ctx, strings.Split(m.Sentinels, ","), m.MasterName, m.SentinelPassword, m.redisTLS, s.in.Rebuild, s.log)
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		key := slotKey(m.Store)
		first := firstSlotServer(ctx, cc, key) // before the ingest's first rebuild (Run starts it)
		go watchCluster(ctx, cc, key, first, s.in.Rebuild, s.log)
	}
}

// catchUpCatalog issues the store's catalog again, under a version above theirs, when
// terminals report holding a higher version than the store's: its data directory was
// restored from an older backup, or made anew, and the terminals ignore every version at or
// below the one they hold. Without it they sold at the old prices until the manager noticed
// (catalog_ahead) and imported again.
func (m *Main) catchUpCatalog(ctx context.Context, cat *catalog.Catalog, led *ledger.Ledger, pub catalog.Publisher, log *slog.Logger) {
	tick := time.NewTicker(m.catalogCheckEvery)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// At most one catching up per m.catalogCatchUpGap: a terminal that keeps reporting a
		// higher version (faulty, or hostile) would have the store send its whole catalog to
		// every till each time.
		if !last.IsZero() && time.Since(last) < m.catalogCatchUpGap {
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

// certCheckEvery is the least time between two looks at the files of a listener's TLS
// certificate, on a handshake or a metrics scrape: a renewal is served within it.
var certCheckEvery = certfile.DefaultEvery

// serveAPI serves the manager API, dashboard and metrics on ln, and samples the charts'
// history until ctx ends (in background); a failure of the server goes to errc.
func (m *Main) serveAPI(ctx context.Context, s *server, ln net.Listener, errc chan<- error, background *sync.WaitGroup) *http.Server {
	a := &api.Server{Token: m.APIToken, Store: m.Store, Ledger: s.led, Gate: s.gate, Ingest: s.in,
		Catalog: s.cat, Settings: s.set, Pub: s.pub, Presence: s.seen, Metrics: s.met.Handler(), MetricsToken: m.MetricsToken, Tokens: s.tokens, Refusals: s.book, Failures: m.APIFailures,
		DiskWarnBytes: m.diskWarnBytes(), UploadState: m.uploadState(), History: s.hist, Logger: s.log}
	background.Add(1)
	go func() { defer background.Done(); s.hist.Run(ctx, a.Probe) }()
	// A backup download sets its own write deadline as it goes (api's progressWriter).
	srv := httpserve.Serve(ln, a.Handler(), httpserve.Default, errc)
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

// publisher is what the store-server sends through: the embedded broker or a client of an
// external one.
type publisher interface {
	ingest.Publisher
	catalog.Publisher
	settings.Publisher
}

// observers tells each of its observers what ingest tells it: the metrics and the charts'
// history.
type observers []ingest.Observer

func (o observers) GateCall(d time.Duration, events int) {
	for _, x := range o {
		x.GateCall(d, events)
	}
}

func (o observers) Commit(d time.Duration, records int) {
	for _, x := range o {
		x.Commit(d, records)
	}
}

func (o observers) Acked(d time.Duration) {
	for _, x := range o {
		x.Acked(d)
	}
}

// lateOut lets ingest exist (and queue messages) before what it publishes through.
type lateOut struct{ p ingest.Publisher }

func (o *lateOut) Publish(topic string, payload []byte) error { return o.p.Publish(topic, payload) }
