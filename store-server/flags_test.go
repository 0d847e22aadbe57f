package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestMQTTAccountFlags: the store's account is for an external broker only, and a password
// needs a user name; the embedded broker admits anyone only on loopback unless told to; the
// manager API's certificate and key go together.
func TestMQTTAccountFlags(t *testing.T) {
	base := []string{"--store", "S1", "--redis-addr", "127.0.0.1:6379", "--api-token-file", secretFile(t, biToken), "--mqtt-listen", "127.0.0.1:1883"}
	pass, mtok := secretFile(t, "p"), secretFile(t, "metrics-token-of-the-tests")
	for _, c := range []struct {
		args []string
		bad  string // a part of the error, "" when the flags are valid
	}{
		{[]string{"--mqtt-url", "tcp://127.0.0.1:1883", "--mqtt-username", "store-S1", "--mqtt-password-file", pass}, ""},
		{[]string{"--mqtt-url", "tcp://127.0.0.1:1883"}, ""},
		{[]string{"--mqtt-username", "store-S1"}, "external broker"},
		{[]string{"--mqtt-url", "tcp://127.0.0.1:1883", "--mqtt-password-file", pass}, "needs --mqtt-username"},
		{[]string{"--api-tls-cert", "c.pem", "--api-tls-key", "k.pem"}, ""},
		{[]string{"--api-tls-cert", "c.pem"}, "go together"},
		{[]string{"--api-tls-key", "k.pem"}, "go together"},
		{[]string{"--metrics-token-file", mtok}, ""},
		{[]string{"--metrics-token-file", secretFile(t, biToken)}, "must differ"},
		{[]string{"--metrics-token-file", secretFile(t, "short")}, "5 bytes, want at least 16"},
		{[]string{"--metrics-token", "metrics-token-of-the-tests"}, "not defined"},
		{[]string{"--api-token", biToken}, "not defined"},
		{[]string{"--redis-password", "p"}, "not defined"},
		{[]string{"--disk-warn-mb", "0"}, ""},
		{[]string{"--clock-skew-warn", "5m"}, ""},
		{[]string{"--clock-skew-warn", "0"}, ""},
		{[]string{"--clock-skew-warn", "-1s"}, "clock-skew-warn"},
		{[]string{"--clock-behind-confirm", "0"}, ""},
		{[]string{"--clock-behind-confirm", "-1s"}, "clock-behind-confirm"},
		{[]string{"--disk-warn-mb", "-1"}, "disk-warn-mb"},
		{[]string{"--disk-warn-mb", "1G"}, "disk-warn-mb"},
		{[]string{"--keep", "90d"}, ""},
		{[]string{"--keep", "30"}, ""},
		{[]string{"--keep", "0"}, ""},
		{[]string{"--keep", "-1d"}, "--keep"},
		{[]string{"--keep", "3mo"}, "--keep"},
		{[]string{"--keep", "2160h"}, "--keep"},
		// The embedded broker admits anyone only on loopback, unless told to: on the store's
		// network it let any device record sales as any terminal.
		{[]string{"--mqtt-listen", "0.0.0.0:1883"}, "anyone on the network"},
		{[]string{"--mqtt-listen", ":1883"}, "anyone on the network"},
		{[]string{"--mqtt-listen", "192.168.1.10:1883"}, "anyone on the network"},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-allow-anonymous"}, "in clear"},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-allow-anonymous", "--insecure-lan"}, ""},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-users", "users.json"}, "in clear"},
		{[]string{"--mqtt-listen", "192.168.1.10:1883", "--mqtt-users", "users.json"}, "--insecure-lan"},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-users", "users.json", "--insecure-lan"}, ""},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-users", "users.json", "--mqtt-tls-cert", "c.pem", "--mqtt-tls-key", "k.pem"}, ""},
		// The manager API beyond loopback speaks TLS too, unless told otherwise.
		{[]string{"--api-listen", "0.0.0.0:8282"}, "manager API on 0.0.0.0:8282 would carry its tokens in clear"},
		{[]string{"--api-listen", ":8282"}, "in clear"},
		{[]string{"--api-listen", "10.0.0.2:8282", "--insecure-lan"}, ""},
		{[]string{"--api-listen", "0.0.0.0:8282", "--api-tls-cert", "c.pem", "--api-tls-key", "k.pem"}, ""},
		{[]string{"--api-listen", "[::1]:8282"}, ""},
		{[]string{"--api-listen", "localhost:8282"}, ""},
		{[]string{"--mqtt-listen", "localhost:1883"}, ""},
		{[]string{"--mqtt-listen", "[::1]:1883"}, ""},
		{[]string{"--mqtt-listen", "0.0.0.0:1883", "--mqtt-url", "tcp://127.0.0.1:1883"}, ""},
		{[]string{"--mqtt-tls-cert", "c.pem", "--mqtt-tls-key", "k.pem"}, ""},
		{[]string{"--mqtt-tls-cert", "c.pem"}, "go together"},
		{[]string{"--mqtt-url", "tcp://127.0.0.1:1883", "--mqtt-tls-cert", "c.pem", "--mqtt-tls-key", "k.pem"}, "embedded broker"},
	} {
		err := NewMain().ParseFlags(append(append([]string{}, base...), c.args...))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v: error %v, want one about %q", c.args, err, c.bad)
		}
	}
}

// TestRedisFlags: the store's Redis is one of Sentinel, a Redis Cluster or one address.
func TestRedisFlags(t *testing.T) {
	base := []string{"--store", "S1", "--api-token-file", secretFile(t, biToken), "--mqtt-listen", "127.0.0.1:1883"}
	for _, c := range []struct {
		args []string
		bad  string
	}{
		{[]string{"--redis-cluster", "127.0.0.1:7000,127.0.0.1:7001"}, ""},
		{[]string{"--redis-sentinels", "127.0.0.1:26379"}, ""},
		{[]string{"--redis-addr", "127.0.0.1:6379"}, ""},
		{nil, "give --redis-sentinels or --redis-cluster"},
		{[]string{"--redis-cluster", "127.0.0.1:7000", "--redis-addr", "127.0.0.1:6379"}, "one of"},
		{[]string{"--redis-cluster", "127.0.0.1:7000", "--redis-sentinels", "127.0.0.1:26379"}, "one of"},
		{[]string{"--redis-addr", "127.0.0.1:6379", "--redis-sentinels", "127.0.0.1:26379"}, "one of"},
		{[]string{"--redis-addr", "127.0.0.1:6379", "--redis-tls-cert", "c.pem", "--redis-tls-key", "k.pem"}, "need --redis-tls-ca"},
		{[]string{"--redis-addr", "127.0.0.1:6379", "--redis-tls-ca", "/nonexistent/ca.pem"}, "--redis-tls-ca"},
		{[]string{"--redis-addr", "127.0.0.1:6379", "--redis-tls-ca", secretFile(t, "not a certificate")}, "no PEM certificate"},
		{[]string{"--redis-addr", "127.0.0.1:6379", "--redis-sentinel-password-file", secretFile(t, "p")}, "for --redis-sentinels"},
		{[]string{"--redis-sentinels", "127.0.0.1:26379", "--redis-sentinel-password-file", secretFile(t, "p")}, ""},
	} {
		err := NewMain().ParseFlags(append(append([]string{}, base...), c.args...))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v: error %v, want one about %q", c.args, err, c.bad)
		}
	}
}

// TestInsecureLANSaysSo: a store that listens beyond loopback in clear (--insecure-lan) says
// so at every start, naming each such listener; one on loopback or over TLS says nothing.
func TestInsecureLANSaysSo(t *testing.T) {
	for _, c := range []struct {
		m    Main
		want []string
	}{
		{Main{MQTTListen: "0.0.0.0:1883", APIListen: "0.0.0.0:8282"}, []string{"embedded broker", "manager API"}},
		{Main{MQTTListen: "0.0.0.0:1883", APIListen: "127.0.0.1:8282"}, []string{"embedded broker"}},
		{Main{MQTTURL: "tcp://10.0.0.1:1883", MQTTListen: "0.0.0.0:1883", APIListen: "10.0.0.2:8282"}, []string{"manager API"}},
		{Main{MQTTListen: "0.0.0.0:1883", MQTTTLSCert: "c.pem", APIListen: "0.0.0.0:8282", APITLSCert: "c.pem"}, nil},
	} {
		var out bytes.Buffer
		c.m.warnInsecure(slog.New(slog.NewTextHandler(&out, nil)))
		if got := strings.Count(out.String(), "INSECURE"); got != len(c.want) {
			t.Errorf("%+v: %d warnings, want %d:\n%s", c.m, got, len(c.want), out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), "level=WARN msg=\"INSECURE: the "+w) {
				t.Errorf("%+v: no warning about the %s:\n%s", c.m, w, out.String())
			}
		}
	}
}
