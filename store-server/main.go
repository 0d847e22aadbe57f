// Command store-server is a store's POS gateway: MQTT ingest from the terminals (embedded
// broker by default), the Redis Sentinel gate (live limits, atomic stock, fen counters, flow
// numbers), the SQLite ledger that judges, and the managers' local API. Run with --help.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"
	_ "time/tzdata" // the zone database, for devices that have none (Windows, Android)

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/history"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/presence"
)

func main() {
	// The store-server keeps a small heap and allocates for every message it decodes, decides
	// and commits; at the default GOGC=100 the collector took about a tenth of its CPU at
	// 5,000 live sales/s. GOGC=400 trades a few more MB for that CPU (store CPU 87.7% →
	// 85.0% over four A/B pairs of the end-to-end live benchmark). An operator's GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if len(os.Args) > 1 && os.Args[1] == "passwd" {
		private.Umask()
		if err := passwd(os.Args[2:], os.Stdin, os.Stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "store-server passwd:", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "restore" {
		private.Umask()
		if err := restore(os.Args[2:], os.Stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "store-server restore:", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "catalog-key" {
		private.Umask()
		if err := catalogKey(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "store-server catalog-key:", err)
			os.Exit(2)
		}
		return
	}
	cli.Main("store-server", NewMain())
}

// Main is the store-server program.
type Main struct {
	Store      string
	DataDir    string
	TZ         string
	Sentinels  string
	MasterName string
	RedisAddr  string
	// Cluster lists seed addresses of a Redis Cluster the store shares with others.
	Cluster       string
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
	// AuditEvery is how often the drift audit compares Redis with the ledger (0: only after
	// a live refusal for stock).
	AuditEvery time.Duration
	// ChartEvery is how often the dashboard's charts' history takes a sample.
	ChartEvery  time.Duration
	APIToken    string
	CatalogFile string
	UploadState string
	LogLevel    string
	// RedisIdemTTL is how long Redis keeps an event's idempotency record.
	RedisIdemTTL time.Duration
	// RedisSweepEvery is how often the store lets go from Redis the keys of the closed days
	// HQ holds whole (0: never).
	RedisSweepEvery time.Duration
	// Keep is how many business days the ledger keeps at hand ("90d"); older days HQ holds
	// whole move to the month's archive (0: none moves). Read into keepDays by Validate.
	Keep     string
	keepDays int

	accessFlags

	// Ready receives the API address and the broker URL once Run has started (for tests).
	Ready chan Addrs

	// catalogCheckEvery is how often the store looks for terminals holding a catalog version
	// above its own; catalogCatchUpGap the least time between two issues of the catalog
	// catching up with them (catchUpCatalog). Tests shorten them.
	catalogCheckEvery, catalogCatchUpGap time.Duration
}

// Addrs are where a running store-server listens.
type Addrs struct {
	API    string
	Broker string
}

// NewMain returns a Main with its defaults.
func NewMain() *Main {
	return &Main{Ready: make(chan Addrs, 1), catalogCheckEvery: 30 * time.Second, catalogCatchUpGap: 10 * time.Minute}
}

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
	str(&m.Cluster, "redis-cluster", "POSGATE_REDIS_CLUSTER", "", "comma-separated addresses of Redis Cluster nodes (host:port,...), for a cluster that serves many stores")
	str(&m.MQTTURL, "mqtt-url", "POSGATE_MQTT_URL", "", "an external MQTT broker (e.g. tcp://127.0.0.1:1883); empty runs the embedded broker")
	str(&m.MQTTUsername, "mqtt-username", "POSGATE_MQTT_USERNAME", "", "the store's account on the external broker (--mqtt-url), if it asks for one")
	str(&m.MQTTListen, "mqtt-listen", "POSGATE_MQTT_LISTEN", "0.0.0.0:1883", "the embedded broker's listen address")
	str(&m.MQTTUsers, "mqtt-users", "POSGATE_MQTT_USERS", "", "JSON file of terminal credentials for the embedded broker ([{username,password,terminal}]); without it the broker admits anyone, and listens only on loopback unless --mqtt-allow-anonymous")
	str(&m.MQTTTLSCert, "mqtt-tls-cert", "POSGATE_MQTT_TLS_CERT", "", "PEM certificate (chain): the embedded broker speaks MQTT over TLS only (terminals use --broker tls://…); with --mqtt-tls-key")
	str(&m.MQTTTLSKey, "mqtt-tls-key", "POSGATE_MQTT_TLS_KEY", "", "PEM private key of --mqtt-tls-cert")
	fs.Bool(&m.MQTTAnonymous, "mqtt-allow-anonymous", "POSGATE_MQTT_ALLOW_ANONYMOUS", false,
		"let the embedded broker admit anyone on a non-loopback --mqtt-listen without --mqtt-users (anyone on the network can then record sales as any terminal: for a trial only)")
	str(&m.APIListen, "api-listen", "POSGATE_API_LISTEN", "127.0.0.1:8282", "the manager API's listen address")
	str(&m.APITLSCert, "api-tls-cert", "POSGATE_API_TLS_CERT", "", "PEM certificate (chain) for HTTPS on the manager API and dashboard; with --api-tls-key")
	str(&m.APITLSKey, "api-tls-key", "POSGATE_API_TLS_KEY", "", "PEM private key of --api-tls-cert")
	str(&m.CatalogFile, "catalog", "POSGATE_CATALOG", "", "a catalog (CSV or JSON) to import at start when the file has changed since it was last imported")
	str(&m.UploadState, "upload-state", "POSGATE_UPLOAD_STATE", "", "the hq-sync uploader's state file, for GET /v1/hq (default: upload.db in --data-dir, where hq-sync upload keeps it by default)")
	str(&m.DiskWarnMB, "disk-warn-mb", "POSGATE_DISK_WARN_MB", "1024", "below this much free room (MiB) on the ledger's disk, the API and dashboard warn (0: never)")
	fs.Duration(&m.ClockSkewWarn, "clock-skew-warn", "POSGATE_CLOCK_SKEW_WARN", presence.DefaultSkewLimit,
		"a till whose clock is further than this from the store's is flagged (its sales take their business date from it); 0: never")
	fs.Duration(&m.ClockBehindConfirm, "clock-behind-confirm", "POSGATE_CLOCK_BEHIND_CONFIRM", presence.DefaultBehindConfirm,
		"a till whose clock reads behind is flagged only once the messages saying so span this long (messages held on their way read behind); 0: at once")
	fs.Duration(&m.AuditEvery, "audit-every", "POSGATE_AUDIT_EVERY", ingest.DefaultAuditEvery,
		"how often the drift audit compares Redis's stock and counters (today's, and another date's in turn) with the ledger, and rebuilds on a difference; 0: only after a live refusal for stock")
	fs.Duration(&m.ChartEvery, "chart-every", "POSGATE_CHART_EVERY", history.DefaultEvery,
		"how often the dashboard's charts sample the gate mode, the tills' backlogs and the ack times (an hour of them is kept in memory)")
	fs.Duration(&m.RedisIdemTTL, "redis-idem-ttl", "POSGATE_REDIS_IDEM_TTL", gate.DefaultIdemTTL,
		"how long Redis keeps each event's idempotency record (a till resending within it is answered from Redis; after it, from the ledger)")
	fs.Duration(&m.RedisSweepEvery, "redis-sweep-every", "POSGATE_REDIS_SWEEP_EVERY", time.Minute,
		"how often the keys of closed business days HQ holds whole (the uploader's state) leave Redis; 0: never")
	str(&m.Keep, "keep", "POSGATE_KEEP", "90d",
		`days the ledger keeps at hand ("90d"): an older day whose keys left Redis (HQ holds it whole) moves to its month's archive, <data-dir>/archive/ledger-YYYY-MM.db, checked, then leaves the ledger; 0 keeps every day in the ledger`)
	str(&m.LogLevel, "log-level", "POSGATE_LOG_LEVEL", "info", "debug, info, warn or error")
	m.defineAccess(fs)
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
	case m.Sentinels == "" && m.RedisAddr == "" && m.Cluster == "":
		return errors.New("give --redis-sentinels or --redis-cluster (production), or --redis-addr")
	case (m.Sentinels != "") && (m.RedisAddr != "") || (m.Sentinels != "") && (m.Cluster != "") || (m.RedisAddr != "") && (m.Cluster != ""):
		return errors.New("give one of --redis-sentinels, --redis-cluster and --redis-addr")
	case m.APIToken == "":
		return errors.New("the manager API's token is required: --api-token-file or POSGATE_API_TOKEN")
	case (m.MQTTUsername != "" || m.MQTTPassword != "") && m.MQTTURL == "":
		return errors.New("--mqtt-username and the MQTT password are for an external broker (--mqtt-url); the embedded broker's accounts are --mqtt-users")
	case m.MQTTPassword != "" && m.MQTTUsername == "":
		return errors.New("the MQTT password (--mqtt-password-file, POSGATE_MQTT_PASSWORD) needs --mqtt-username")
	case (m.APITLSCert == "") != (m.APITLSKey == ""):
		return errors.New("--api-tls-cert and --api-tls-key go together")
	case (m.MQTTTLSCert == "") != (m.MQTTTLSKey == ""):
		return errors.New("--mqtt-tls-cert and --mqtt-tls-key go together")
	case m.MQTTTLSCert != "" && m.MQTTURL != "":
		return errors.New("--mqtt-tls-cert is for the embedded broker; an external broker (--mqtt-url) has its own")
	case m.ClockSkewWarn < 0:
		return fmt.Errorf("--clock-skew-warn %v: want a duration, 0 or more", m.ClockSkewWarn)
	case m.ChartEvery < time.Second || m.ChartEvery > 5*time.Minute:
		return fmt.Errorf("--chart-every %v: want 1s to 5m", m.ChartEvery)
	case m.RedisIdemTTL < time.Second:
		return fmt.Errorf("--redis-idem-ttl %v: want a second or more", m.RedisIdemTTL)
	case !m.parseKeep():
		return fmt.Errorf("--keep %q: want whole days such as \"90d\" , or 0", m.Keep)
	case m.RedisSweepEvery < 0:
		return fmt.Errorf("--redis-sweep-every %v: want a duration, 0 or more", m.RedisSweepEvery)
	case m.ClockBehindConfirm < 0:
		return fmt.Errorf("--clock-behind-confirm %v: want a duration, 0 or more", m.ClockBehindConfirm)
	case m.AuditEvery < 0:
		return fmt.Errorf("--audit-every %v: want a duration, 0 or more", m.AuditEvery)
	case !validMB(m.DiskWarnMB):
		return fmt.Errorf("--disk-warn-mb %q: want a whole number of MiB, 0 or more", m.DiskWarnMB)
	case m.MetricsToken != "" && m.MetricsToken == m.APIToken:
		return errors.New("the metrics token must differ from the manager API's token (it opens /metrics only)")
	case m.MQTTURL == "" && m.MQTTUsers == "" && !m.MQTTAnonymous && !isLoopback(m.MQTTListen):
		return fmt.Errorf("the embedded broker on %s without --mqtt-users would let anyone on the network record sales as "+
			"any terminal: give each terminal its account (--mqtt-users), or listen on loopback (--mqtt-listen 127.0.0.1:1883), "+
			"or say --mqtt-allow-anonymous for a trial", m.MQTTListen)
	}
	if _, err := wire.LoadLocation(m.TZ); err != nil {
		return fmt.Errorf("--tz: %w", err)
	}
	return m.validateAccess()
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
