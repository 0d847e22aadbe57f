package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/refusals"
	"github.com/posgate/posgate/store-server/api"
	"github.com/posgate/posgate/store-server/broker"
	"github.com/posgate/posgate/store-server/enrol"
)

// accessFlags are the settings of who may reach what (Main embeds them).
type accessFlags struct {
	// SentinelPassword is the Sentinels' own password (their requirepass).
	SentinelPassword string
	// RedisTLSCA, RedisTLSCert and RedisTLSKey speak TLS to Redis (redisTLSConfig).
	RedisTLSCA, RedisTLSCert, RedisTLSKey string
	redisTLS                              *tls.Config // read by Validate
	// APIFailures counts the manager API's requests without a valid token per address
	// (nil: api.Server's default guard; tests that send many on purpose set their own).
	APIFailures *guard.Guard
	// APITokens is the file of the manager API's tokens with roles (api.LoadTokens).
	APITokens string
	// TerminalsFile lists the enrolled terminals besides the accounts' (enrol).
	TerminalsFile string
	// InsecureLAN lets the broker and the API listen beyond loopback without TLS.
	InsecureLAN bool
}

// CodeTerminalsRequired is the refusal to start of a store-server given no enrolled-terminal
// list: it would take any terminal id the broker lets publish.
const CodeTerminalsRequired = "terminals_required"

// openEnrolment lets a store-server run with no enrolled-terminal list, every terminal
// welcome. The binary never sets it; this package's tests that run the store in-process for
// other jobs than enrolment do (those of enrolment give --terminals or --mqtt-users).
var openEnrolment = false

// errTerminalsRequired is the refusal to start without an enrolled-terminal list; why says
// what was given.
func errTerminalsRequired(why string) error {
	return perr.New(perr.Invalid, CodeTerminalsRequired,
		"%s, so the store would take any terminal id the broker lets publish: list the store's tills in a file, "+
			"one terminal id a line, and give it as --terminals (POSGATE_TERMINALS; read again when it changes, "+
			"an empty file enrols none yet), or give the embedded broker its tills' accounts (--mqtt-users)", why)
}

// requireEnrolment refuses a start that names no enrolled terminals: neither --terminals nor,
// on the embedded broker, --mqtt-users (an external broker's accounts are the broker's).
func (m *Main) requireEnrolment() error {
	switch {
	case openEnrolment || m.TerminalsFile != "":
		return nil
	case m.MQTTURL != "":
		return errTerminalsRequired("no --terminals with an external broker (--mqtt-url)")
	case m.MQTTUsers == "":
		return errTerminalsRequired("neither --terminals nor --mqtt-users")
	}
	return nil
}

// MinTokenBytes is the shortest manager or metrics token the store-server takes.
const MinTokenBytes = 16

// defineAccess defines the flags of who may reach what: the secrets (each from its file,
// --X-file, or its environment variable, never an argument: cli.Flags.Secret), the tokens
// with roles, the enrolled terminals and --insecure-lan.
func (m *Main) defineAccess(fs *cli.Flags) {
	fs.String(&m.APITokens, "api-tokens", "POSGATE_API_TOKENS", "",
		`file of the manager API's tokens of one role each, besides --api-token-file's, which may do everything: [{"name":"wall","role":"viewer","token":"…"}]; roles viewer (the dashboard, reads), operator (reads and changes), backup (GET /v1/backup)`)
	fs.String(&m.TerminalsFile, "terminals", "POSGATE_TERMINALS", "",
		"file of the enrolled terminals, one id a line (read again when it changes), besides those of --mqtt-users; a message of any other terminal is dropped (terminal_unknown). Required unless --mqtt-users gives the embedded broker its accounts")
	fs.Bool(&m.InsecureLAN, "insecure-lan", "POSGATE_INSECURE_LAN", false,
		"let the embedded broker and the manager API listen beyond loopback without TLS (passwords, tokens and sales in clear on the network: for a trial only)")
	fs.Secret(&m.APIToken, "api-token", "POSGATE_API_TOKEN", MinTokenBytes, "the manager API's bearer token (required)")
	fs.Secret(&m.MetricsToken, "metrics-token", "POSGATE_METRICS_TOKEN", MinTokenBytes,
		"a bearer token for GET /metrics only (for Prometheus), besides the manager token")
	fs.Secret(&m.RedisPassword, "redis-password", "POSGATE_REDIS_PASSWORD", 1,
		"the password of Redis (its requirepass; masterauth on its replicas)")
	fs.Secret(&m.SentinelPassword, "redis-sentinel-password", "POSGATE_REDIS_SENTINEL_PASSWORD", 1,
		"the password of the Sentinels (their requirepass), when they ask for one")
	fs.String(&m.RedisTLSCA, "redis-tls-ca", "POSGATE_REDIS_TLS_CA", "",
		"speak TLS to Redis (its tls-port), trusting the authority in this PEM file for Redis's certificate")
	fs.String(&m.RedisTLSCert, "redis-tls-cert", "POSGATE_REDIS_TLS_CERT", "",
		"PEM client certificate for Redis's TLS port, when Redis asks for one (tls-auth-clients); with --redis-tls-key and --redis-tls-ca")
	fs.String(&m.RedisTLSKey, "redis-tls-key", "POSGATE_REDIS_TLS_KEY", "", "PEM private key of --redis-tls-cert")
	fs.Secret(&m.MQTTPassword, "mqtt-password", "POSGATE_MQTT_PASSWORD", 1,
		"the password of --mqtt-username on the external broker")
}

// redisTLSConfig reads --redis-tls-ca (and the client pair) into the TLS configuration of
// every connection to Redis, the Sentinels and a Redis Cluster; nil without --redis-tls-ca.
func (m *Main) redisTLSConfig() (*tls.Config, error) {
	if m.RedisTLSCA == "" {
		if m.RedisTLSCert != "" || m.RedisTLSKey != "" {
			return nil, errors.New("--redis-tls-cert and --redis-tls-key need --redis-tls-ca")
		}
		return nil, nil
	}
	if (m.RedisTLSCert == "") != (m.RedisTLSKey == "") {
		return nil, errors.New("--redis-tls-cert and --redis-tls-key go together")
	}
	pem, err := os.ReadFile(m.RedisTLSCA)
	if err != nil {
		return nil, fmt.Errorf("--redis-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--redis-tls-ca %s holds no PEM certificate", m.RedisTLSCA)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if m.RedisTLSCert != "" {
		pair, err := tls.LoadX509KeyPair(m.RedisTLSCert, m.RedisTLSKey)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// validateAccess checks the settings of who may reach what: listeners beyond loopback
// speak TLS unless --insecure-lan; Redis's TLS; the Sentinels' password with Sentinels.
func (m *Main) validateAccess() error {
	if m.SentinelPassword != "" && m.Sentinels == "" {
		return errors.New("the Sentinels' password is for --redis-sentinels")
	}
	if err := m.requireEnrolment(); err != nil {
		return err
	}
	if !m.InsecureLAN {
		if m.MQTTURL == "" && m.MQTTTLSCert == "" && !isLoopback(m.MQTTListen) {
			return fmt.Errorf("the embedded broker on %s would carry the tills' passwords and sales in clear on the network: "+
				"give it a certificate (--mqtt-tls-cert, --mqtt-tls-key; tills use tls://), listen on loopback, "+
				"or say --insecure-lan for a trial", m.MQTTListen)
		}
		if m.APITLSCert == "" && !isLoopback(m.APIListen) {
			return fmt.Errorf("the manager API on %s would carry its tokens in clear on the network: "+
				"give it a certificate (--api-tls-cert, --api-tls-key), listen on loopback, or say --insecure-lan for a trial", m.APIListen)
		}
	}
	cfg, err := m.redisTLSConfig()
	if err != nil {
		return err
	}
	m.redisTLS = cfg
	return nil
}

// warnInsecure says, at every start, which listener speaks in clear beyond loopback.
func (m *Main) warnInsecure(log *slog.Logger) {
	if m.MQTTURL == "" && m.MQTTTLSCert == "" && !isLoopback(m.MQTTListen) {
		log.Warn("INSECURE: the embedded broker listens beyond loopback without TLS (--insecure-lan): "+
			"the tills' passwords and sales cross the network in clear", "listen", m.MQTTListen)
	}
	if m.APITLSCert == "" && !isLoopback(m.APIListen) {
		log.Warn("INSECURE: the manager API listens beyond loopback without TLS (--insecure-lan): "+
			"its tokens cross the network in clear", "listen", m.APIListen)
	}
}

// enrolTerminals makes the book of refusals, reads the manager API's tokens with roles, and
// makes the list of enrolled terminals: those of the broker's accounts and of --terminals.
func (m *Main) enrolTerminals(s *server) error {
	s.book = refusals.New(s.log, refusals.DefaultEvery, refusals.StoreMetric)
	var accounts []string
	if m.MQTTUsers != "" && m.MQTTURL == "" {
		users, err := broker.LoadUsers(m.MQTTUsers)
		if err != nil {
			return err
		}
		for _, u := range users {
			accounts = append(accounts, u.Terminal)
		}
	}
	if m.APITokens != "" {
		if err := private.Files(s.log, m.APITokens); err != nil {
			return err
		}
		tokens, err := api.LoadTokens(m.APITokens)
		if err != nil {
			return fmt.Errorf("--api-tokens: %w", err)
		}
		for _, t := range tokens {
			if t.Token == m.APIToken || t.Token == m.MetricsToken {
				return fmt.Errorf("--api-tokens: %s: the token is the store's own or the metrics token", t.Name)
			}
		}
		s.tokens = tokens
	}
	list, err := enrol.New(m.TerminalsFile, accounts, s.book, s.log)
	if err != nil {
		return fmt.Errorf("--terminals: %w", err)
	}
	s.enrolled = list
	if list.Open() {
		if !openEnrolment {
			return errTerminalsRequired("no terminal enrolled by --mqtt-users or --terminals")
		}
		s.log.Warn("no enrolled-terminal list (--terminals, --mqtt-users): any terminal id the broker lets publish is taken")
	} else {
		s.log.Info("enrolled terminals", "count", list.Count())
	}
	return nil
}
