package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/posgate/posgate/internal/cli"
)

// MinTokenBytes is the shortest manager or metrics token the store-server takes.
const MinTokenBytes = 16

// defineSecrets defines the store-server's secrets: each from its file (--X-file) or its
// environment variable, never an argument (cli.Flags.Secret).
func (m *Main) defineSecrets(fs *cli.Flags) {
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

// validateAccess checks the settings of who may reach what: Redis's TLS, and (for
// --sentinel password) that Sentinels are in use.
func (m *Main) validateAccess() error {
	if m.SentinelPassword != "" && m.Sentinels == "" {
		return errors.New("the Sentinels' password is for --redis-sentinels")
	}
	cfg, err := m.redisTLSConfig()
	if err != nil {
		return err
	}
	m.redisTLS = cfg
	return nil
}
