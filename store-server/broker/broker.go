// Package broker is the store-server's embedded MQTT broker (mochi-mqtt), the default for a
// single store: terminals connect to it directly and no separate broker runs. The
// store-server itself is inside it: up messages reach ingest through an inline subscription
// and acks and the catalog go out through Publish, with no client connection of its own.
//
// Its limits are raised above mochi's defaults (which silently dropped most of a 100k-message
// burst to a slow subscriber), and, when given a credentials file, it enforces that each
// terminal publishes only on its own up, status and backlog topics and reads only its own down topic
// and the catalog. posgate never relies on the broker keeping messages: every message that
// matters is acked end to end.
package broker

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/wire"
)

// User is a terminal's MQTT credentials, bound to its terminal id.
type User struct {
	Username string `json:"username"`
	// PasswordHash is the bcrypt hash of the account's password (HashPassword; store-server
	// passwd writes it): the users file holds no password.
	PasswordHash string `json:"password_hash"`
	Terminal     string `json:"terminal"`
}

// Config configures the broker.
type Config struct {
	Addr string // TCP listen address, e.g. "127.0.0.1:1883" or ":1883"
	// TLS, if not nil, has the broker speak MQTT over TLS only (clients connect with tls://):
	// the terminals' passwords and events then do not cross the store's network in clear.
	TLS   *tls.Config
	Store string
	// Users, if not nil, are the only terminals allowed in, each confined to its own topics.
	// Nil allows anonymous clients (a store LAN without credentials set up).
	Users []User
	// OnUp, if not nil, gets every message on the store's up topics, inside the broker: the
	// store-server's ingest reads them without a client connection of its own. It runs on
	// the publishing terminal's connection goroutine, after the broker's PUBACK, so a slow
	// OnUp holds back that terminal's next messages and no other's.
	OnUp func(topic string, payload []byte)
	// OnStatus, if not nil, gets every message on the store's status and backlog topics
	// (the terminals' presence, last wills and backlog reports), inside the broker, and
	// whether it is a retained message sent on subscribing.
	OnStatus func(topic string, payload []byte, retained bool)
	Logger   *slog.Logger
	// MaxConns bounds the connections served at once (DefaultMaxConns when 0); a further
	// one waits in the kernel's queue until one closes.
	MaxConns int
	// Logins counts failed logins per account and per address (nil: five free, then a wait
	// doubling from 1 s to 5 minutes).
	Logins *guard.Guard
	// Refusals, if not nil, books every refused login, publish and subscription by its
	// code (refusals.Book: counted, and logged at most once in a while); nil: each is
	// logged as a warning.
	Refusals Booker
}

// ConnectWithin is how long a new connection has to send its CONNECT packet: mochi sets no
// deadline before it, and a connection that never sent one was kept for good.
const ConnectWithin = 10 * time.Second

// Broker is a running embedded broker.
type Broker struct {
	srv  *mqtt.Server
	ln   net.Listener
	tls  bool
	done chan error
	log  *slog.Logger
}

// Start starts the broker.
func Start(cfg Config) (*Broker, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumInflight = 65535
	// A client's queue of pending writes is a channel of this many pointers, made whole at
	// connect and scanned by every garbage collection. 1<<20 was needed while the
	// store-server was itself a client receiving every terminal's messages (8 MB per client,
	// and long collections: ack p99 over 90 ms at 5,000/s); a terminal receives only its own
	// acks and the catalog, which its window of unacked events bounds.
	caps.MaximumClientWritesPending = 16 << 10
	caps.MaximumMessageExpiryInterval = 0
	// mochi reads a packet whole into a buffer of the length its header announces, before the
	// client has logged in: without a bound, five bytes made it take 256 MiB. The bound is
	// the one the terminals keep their messages under (wire.MaxPacketBytes).
	caps.MaximumPacketSize = wire.MaxPacketBytes
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "broker")
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: log, InlineClient: true})
	auth := newAuthHook(cfg, log)
	auth.owner = func(id string) (string, bool) {
		if cl, ok := srv.Clients.Get(id); ok {
			return string(cl.Properties.Username), true
		}
		return "", false
	}
	if err := srv.AddHook(auth, nil); err != nil {
		return nil, err
	}
	if cfg.OnUp != nil { // before Serve: no up message can come before it
		err := srv.Subscribe(wire.UpWildcard(cfg.Store), 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
			cfg.OnUp(pk.TopicName, pk.Payload)
		})
		if err != nil {
			return nil, fmt.Errorf("mqtt inline subscription: %w", err)
		}
	}
	if cfg.OnStatus != nil {
		for i, filter := range []string{wire.StatusWildcard(cfg.Store), wire.BacklogWildcard(cfg.Store)} {
			err := srv.Subscribe(filter, 2+i, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
				// Never a retained message sent on subscribing: this subscription is made
				// before the broker serves, and it keeps no messages across a restart.
				cfg.OnStatus(pk.TopicName, pk.Payload, false)
			})
			if err != nil {
				return nil, fmt.Errorf("mqtt inline subscription: %w", err)
			}
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mqtt listen %s: %w", cfg.Addr, err)
	}
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	accept := newConnectListener(ln, cfg.TLS, maxConns, log)
	if err := srv.AddListener(listeners.NewNet("posgate", accept)); err != nil {
		accept.Close()
		return nil, fmt.Errorf("mqtt listen %s: %w", cfg.Addr, err)
	}
	b := &Broker{srv: srv, ln: ln, tls: cfg.TLS != nil, done: make(chan error, 1), log: log}
	if err := srv.Serve(); err != nil {
		return nil, err
	}
	return b, nil
}

// Addr returns the listening address.
func (b *Broker) Addr() string { return b.ln.Addr().String() }

// URL returns the broker URL for clients.
func (b *Broker) URL() string {
	if b.tls {
		return "tls://" + b.Addr()
	}
	return "tcp://" + b.Addr()
}

// Publish sends a message (QoS 1, not retained) to the topic's subscribers from inside the
// broker. Like a client's PUBACK, its return means only that the broker has taken it.
func (b *Broker) Publish(topic string, payload []byte) error {
	return b.srv.Publish(topic, payload, false, 1)
}

// PublishRetained publishes a retained message (QoS 1) from inside the broker.
func (b *Broker) PublishRetained(topic string, payload []byte) error {
	return b.srv.Publish(topic, payload, true, 1)
}

// Close stops the broker. It returns after closeWait at most: mochi's Server.Close can
// deadlock (Clients.GetByListener takes the clients' read lock twice, and a client that
// connects or leaves between the two takes the write lock in between; mochi-mqtt/server
// issue 488), and a store-server that is shutting down must not hang on it.
func (b *Broker) Close() error {
	err := closeWithin(b.srv.Close, closeWait)
	if errors.Is(err, errCloseStuck) {
		b.log.Error("the MQTT broker did not close; going on without it", "waited", closeWait)
	}
	return err
}

var (
	closeWait     = 10 * time.Second
	errCloseStuck = errors.New("broker: close did not return")
)

// closeWithin runs close and returns its error, or errCloseStuck once wait has passed
// (close then goes on in the background).
func closeWithin(close func() error, wait time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- close() }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errCloseStuck
	}
}

// authHook authenticates terminals and confines each to its own topics. Every refusal is
// logged: a terminal set up with the wrong account is otherwise only a client that keeps
// reconnecting (mochi drops an MQTT 3.1.1 client that publishes where it may not).
type authHook struct {
	mqtt.HookBase
	open     bool                // no users configured: anonymous store LAN, every topic
	accounts map[string]*account // by username
	logins   *logins
	catalog  string
	settings string // the store's settings: read by every terminal, written by the store alone
	hq       string // the last day HQ holds (wire.HQHeld): read by every terminal, written by the store alone
	// keys is the chain of the catalog key's rotations (wire.CatalogKeys): read by every
	// terminal, written by the store alone.
	keys string
	// agentPrefix starts the client id of every terminal agent of the store (the terminal's
	// id follows).
	agentPrefix string
	log         *slog.Logger
	book        Booker
	// owner returns the user name of the client (connected, or with a session kept) that
	// has client id id.
	owner func(id string) (user string, ok bool)
}

// account is a terminal's credentials and the topics it may use, worked out once: the ACL
// check runs for every message a terminal publishes.
type account struct {
	User
	up, status, backlog, down string
}

func newAuthHook(cfg Config, log *slog.Logger) *authHook {
	h := &authHook{open: cfg.Users == nil, accounts: map[string]*account{}, catalog: wire.CatalogTopic(cfg.Store),
		settings: wire.SettingsTopic(cfg.Store), hq: wire.HQHeldTopic(cfg.Store), keys: wire.CatalogKeysTopic(cfg.Store), log: log, book: cfg.Refusals,
		agentPrefix: "posgate-" + cfg.Store + "-", logins: newLogins(cfg.Logins)}
	for _, u := range cfg.Users {
		h.accounts[u.Username] = &account{User: u, up: wire.UpTopic(cfg.Store, u.Terminal),
			status: wire.StatusTopic(cfg.Store, u.Terminal), backlog: wire.BacklogTopic(cfg.Store, u.Terminal),
			down: wire.DownTopic(cfg.Store, u.Terminal)}
	}
	return h
}

func (h *authHook) ID() string { return "posgate-auth" }

func (h *authHook) ownerOf(id string) (string, bool) {
	if h.owner == nil {
		return "", false
	}
	return h.owner(id)
}

func (h *authHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}

func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if h.open {
		return true
	}
	addr := remoteHost(cl.Net.Remote)
	a, ok := h.accounts[string(pk.Connect.Username)]
	if !ok {
		reason := "unknown user"
		if h.logins.fail(addr) != nil {
			reason = "too many failed logins from the address"
		}
		code := CodeUserUnknown
		if reason != "unknown user" {
			code = CodeTooManyLogins
		}
		h.refuse(code, "connection refused: "+reason, "client", pk.Connect.ClientIdentifier,
			"user", string(pk.Connect.Username), "remote", cl.Net.Remote)
		return false
	}
	if err := h.logins.check(a, pk.Connect.Password, addr); err != nil {
		code := CodePasswordWrong
		if errors.Is(err, errWait) {
			code = CodeTooManyLogins
		}
		h.refuse(code, "connection refused: "+err.Error(), "client", pk.Connect.ClientIdentifier,
			"user", a.Username, "terminal", a.Terminal, "remote", cl.Net.Remote)
		return false
	}
	// The broker publishes a last will without an ACL check: a terminal may leave one only
	// on its own status topic (its agent's "offline"), or it could publish as another
	// terminal, or replace the retained catalog, by dropping its connection.
	if pk.Connect.WillFlag && pk.Connect.WillTopic != a.status {
		h.refuse(CodeWillTopic, "connection refused: last will not on the terminal's status topic", "client", pk.Connect.ClientIdentifier,
			"user", a.Username, "terminal", a.Terminal, "will_topic", pk.Connect.WillTopic, "remote", cl.Net.Remote)
		return false
	}
	// A terminal's agent connects as posgate-<store>-<terminal>: an account may not take the
	// client id of another terminal, or after a restart of the broker (which keeps no
	// sessions) it could hold that terminal's session first and lock it out.
	if id := pk.Connect.ClientIdentifier; strings.HasPrefix(id, h.agentPrefix) && id != h.agentPrefix+a.Terminal {
		h.refuse(CodeClientIDForeign, "connection refused: another terminal's client id", "client", id,
			"user", a.Username, "terminal", a.Terminal, "remote", cl.Net.Remote)
		return false
	}
	// A session the broker keeps after a disconnect (the agent's, to get its acks back) is
	// the terminal's one, under its agent's client id. Under any other id a terminal's
	// account connects only with a session that ends with the connection (a tool's): else
	// each new id would leave a session behind, its subscriptions and queued messages held
	// for as long as the broker runs.
	if id := pk.Connect.ClientIdentifier; id != h.agentPrefix+a.Terminal && !sessionEndsWithConnection(pk) {
		h.refuse(CodeSessionKept, "connection refused: a kept session under another client id than the terminal agent's", "client", id,
			"user", a.Username, "terminal", a.Terminal, "want_client", h.agentPrefix+a.Terminal, "remote", cl.Net.Remote)
		return false
	}
	// A client id belongs to the account that holds it: another account connecting with it
	// would take over its session, and the messages queued for it, which the broker sends
	// again without an ACL check.
	if owner, ok := h.ownerOf(pk.Connect.ClientIdentifier); ok && owner != a.Username {
		h.refuse(CodeClientIDHeld, "connection refused: client id held by another account", "client", pk.Connect.ClientIdentifier,
			"user", a.Username, "terminal", a.Terminal, "remote", cl.Net.Remote)
		return false
	}
	return true
}

// sessionEndsWithConnection reports whether the broker drops the session of a CONNECT when
// its connection ends: a clean session in MQTT 3.1.1, and in MQTT 5 a session expiry
// interval of 0 (also when the property is absent).
func sessionEndsWithConnection(pk packets.Packet) bool {
	if pk.ProtocolVersion == 5 {
		return pk.Properties.SessionExpiryInterval == 0
	}
	return pk.Connect.Clean
}

func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if h.open {
		return true
	}
	a, ok := h.accounts[string(cl.Properties.Username)]
	if !ok {
		return false // not authenticated by this hook
	}
	if write {
		if topic == a.up || topic == a.status || topic == a.backlog {
			return true
		}
		h.refuse(CodePublishDenied, "publish refused: not this terminal's topic", "client", cl.ID, "user", a.Username,
			"terminal", a.Terminal, "topic", topic)
		return false
	}
	if topic == a.down || topic == h.catalog || topic == h.settings || topic == h.hq || topic == h.keys {
		return true
	}
	h.refuse(CodeSubscribeDenied, "subscription refused: not this terminal's topic", "client", cl.ID, "user", a.Username,
		"terminal", a.Terminal, "topic", topic)
	return false
}

// The codes of the broker's refusals.
const (
	CodeUserUnknown     = "mqtt_user_unknown"
	CodePasswordWrong   = "mqtt_password_wrong"
	CodeTooManyLogins   = "mqtt_too_many_failures"
	CodeWillTopic       = "mqtt_will_topic_denied"
	CodeClientIDForeign = "mqtt_client_id_foreign"
	CodeSessionKept     = "mqtt_session_denied"
	CodeClientIDHeld    = "mqtt_client_id_held"
	CodePublishDenied   = "mqtt_publish_denied"
	CodeSubscribeDenied = "mqtt_subscribe_denied"
)

// Booker books a refusal by its code (refusals.Book).
type Booker interface {
	Note(level slog.Level, code, msg string, attrs ...any)
}

// refuse books a refusal, or logs it when the broker has no book.
func (h *authHook) refuse(code, msg string, attrs ...any) {
	if h.book != nil {
		h.book.Note(slog.LevelWarn, code, msg, attrs...)
		return
	}
	h.log.Warn(msg, append([]any{"code", code}, attrs...)...)
}

// remoteHost is the host of a client's remote address, without its port.
func remoteHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
