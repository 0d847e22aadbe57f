// Package bus is the store-server's MQTT client (paho, QoS 1, persistent session) of an
// external broker (--mqtt-url; the embedded broker needs none): it subscribes to every
// terminal's up topic of the store, hands each message to ingest in arrival order, and
// publishes acks and the retained catalog.
package bus

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/mqttconn"
	"github.com/posgate/posgate/internal/wire"
)

// Config configures a Client.
type Config struct {
	URL      string
	ClientID string
	Store    string
	// Username and Password are the store's account on the broker, when it asks for one.
	Username, Password string
	// OnUp receives every up message in arrival order; it may block (back-pressure).
	OnUp func(topic string, payload []byte)
	// OnStatus, if not nil, receives every message on the store's status and backlog topics,
	// and whether the broker sent it as the topic's retained message.
	OnStatus func(topic string, payload []byte, retained bool)
	// OnConnected, if not nil, runs (on a goroutine of its own) after each connection's
	// subscriptions: a broker restarted without persistence has lost the retained catalog,
	// which the store then publishes again.
	OnConnected func()
	Logger      *slog.Logger
}

// Client is the store-server's connection to an external broker.
type Client struct {
	c   mqtt.Client
	log *slog.Logger
}

// coalesceWindow is the longest a write to the broker waits to go out with others (see
// coalescingConn): a PUBACK or an ack a terminal waits for is late by at most this.
const coalesceWindow = 500 * time.Microsecond

// Connect connects (retrying in the background until ctx ends) and subscribes.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "bus")
	if cfg.ClientID == "" {
		cfg.ClientID = "posgate-store-" + cfg.Store
	}
	opts := mqtt.NewClientOptions().AddBroker(cfg.URL).SetClientID(cfg.ClientID).
		SetCleanSession(false).SetOrderMatters(true).SetAutoReconnect(true).
		SetConnectRetry(true).SetConnectRetryInterval(500 * time.Millisecond).SetMaxReconnectInterval(2 * time.Second).
		SetKeepAlive(5 * time.Second).SetPingTimeout(3 * time.Second).SetWriteTimeout(5 * time.Second).
		SetMessageChannelDepth(10000).SetUsername(cfg.Username).SetPassword(cfg.Password) // sent only if a user is set
	mqttconn.Use(opts, cfg.URL, func(c net.Conn) net.Conn { return newCoalescingConn(c, coalesceWindow) })
	opts.SetOnConnectHandler(func(c mqtt.Client) {
		t := c.Subscribe(wire.UpWildcard(cfg.Store), 1, func(_ mqtt.Client, m mqtt.Message) {
			cfg.OnUp(m.Topic(), m.Payload())
		})
		if t.Wait() && t.Error() != nil {
			log.Error("subscribe", "err", t.Error())
			return
		}
		if refused(t) {
			log.Error("the broker refused the subscription to the terminals' events: nothing will be ingested; "+
				"give the store's account read on it", "filter", wire.UpWildcard(cfg.Store))
			return
		}
		if cfg.OnStatus != nil {
			for _, filter := range []string{wire.StatusWildcard(cfg.Store), wire.BacklogWildcard(cfg.Store)} {
				t := c.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) {
					cfg.OnStatus(m.Topic(), m.Payload(), m.Retained())
				})
				if t.Wait() && t.Error() != nil {
					log.Error("subscribe", "err", t.Error())
				} else if refused(t) {
					log.Error("the broker refused the subscription: give the store's account read on it",
						"filter", filter)
				}
			}
		}
		log.Info("connected", "broker", cfg.URL)
		if cfg.OnConnected != nil {
			go cfg.OnConnected()
		}
	})
	opts.SetConnectionLostHandler(func(_ mqtt.Client, err error) { log.Warn("connection lost", "err", err) })
	c := mqtt.NewClient(opts)
	t := c.Connect()
	select {
	case <-t.Done():
		if t.Error() != nil {
			return nil, fmt.Errorf("mqtt connect %s: %w", cfg.URL, t.Error())
		}
	case <-ctx.Done():
		c.Disconnect(0) // stops the retries
		return nil, ctx.Err()
	}
	return &Client{c: c, log: log}, nil
}

// Publish sends a down message (QoS 1). It does not wait for the broker's PUBACK: the
// terminal's own resend covers a lost ack.
func (b *Client) Publish(topic string, payload []byte) error {
	t := b.c.Publish(topic, 1, false, payload)
	select {
	case <-t.Done():
		return t.Error()
	default:
		return nil
	}
}

// PublishRetained publishes a retained message and waits for the broker to have it.
func (b *Client) PublishRetained(topic string, payload []byte) error {
	t := b.c.Publish(topic, 1, true, payload)
	if !t.WaitTimeout(10 * time.Second) {
		return fmt.Errorf("publish %s: timed out", topic)
	}
	return t.Error()
}

// Close disconnects.
func (b *Client) Close() { b.c.Disconnect(500) }

// refused reports whether the broker answered a subscription with the failure code 0x80:
// paho counts that as done, without an error, and the messages never come. (mosquitto 2.0
// grants a filter the account may not read, and then delivers nothing of it.)
func refused(t mqtt.Token) bool {
	st, ok := t.(*mqtt.SubscribeToken)
	if !ok {
		return false
	}
	for _, code := range st.Result() {
		if code == 0x80 {
			return true
		}
	}
	return false
}
