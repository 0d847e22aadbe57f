package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/store-server/client"
	agentclient "github.com/posgate/posgate/terminal-agent/client"
)

// StoreOptions configure a store-server process.
type StoreOptions struct {
	Store      string
	DataDir    string
	TZ         string
	Sentinels  []string // or RedisAddr
	MasterName string
	RedisAddr  string
	Cluster    []string // a Redis Cluster's nodes (--redis-cluster), instead of Sentinels or RedisAddr
	MQTTURL    string   // external broker; empty runs the embedded one on MQTTListen
	MQTTListen string   // default: a free loopback port
	Token      string   // the manager API's token (POSGATE_API_TOKEN), at least 16 bytes
	// RedisPassword is the password of Redis and the Sentinels (POSGATE_REDIS_PASSWORD).
	RedisPassword string
	Catalog       string // a catalog file to import at start
	// Terminals are enrolled at start (besides the agents StartAgent starts for the store,
	// and those Enrol adds), unless Extra gives --terminals or --mqtt-users (e2e/enrol.go).
	Terminals []string
	LogLevel  string
	Extra     []string // more flags
}

// StoreServer is a store-server process.
type StoreServer struct {
	*Proc
	Opts   StoreOptions
	API    string // host:port of the manager API
	Broker string // MQTT URL terminals connect to
	// terminals is the file of its enrolled terminals the harness keeps ("": the test's own).
	terminals string
}

// StartStore starts a store-server and waits until its API and broker listen. A port that
// another process took between FreeAddr and the server's bind makes it start again on
// other ports (up to five times); restarts keep the ports.
func StartStore(ctx context.Context, bin string, o StoreOptions) (*StoreServer, error) {
	if o.Token == "" {
		o.Token = "manager-token-of-the-tests"
	}
	if o.TZ == "" {
		o.TZ = "Asia/Shanghai"
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	pickListen := o.MQTTURL == "" && o.MQTTListen == ""
	terminals, err := enrolStore(o)
	if err != nil {
		return nil, err
	}
	if terminals != "" {
		o.Extra = append(slices.Clip(o.Extra), "--terminals", terminals)
	}
	for attempt := 1; ; attempt++ {
		api, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if pickListen {
			if o.MQTTListen, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		s := newStore(bin, o, api)
		s.terminals = terminals
		if err = s.Restart(ctx); err == nil || attempt == 5 || !portTaken(err) {
			register(s)
			return s, err
		}
	}
}

// freeAddr is FreeAddr; tests replace it to hand out a taken port.
var freeAddr = FreeAddr

func newStore(bin string, o StoreOptions, api string) *StoreServer {
	broker := o.MQTTURL
	if broker == "" {
		broker = "tcp://" + o.MQTTListen
	}
	args := []string{"--store", o.Store, "--data-dir", o.DataDir, "--tz", o.TZ, "--api-listen", api,
		"--log-level", o.LogLevel}
	env := []string{"POSGATE_API_TOKEN=" + o.Token}
	if o.RedisPassword != "" {
		env = append(env, "POSGATE_REDIS_PASSWORD="+o.RedisPassword)
	}
	switch {
	case len(o.Cluster) > 0:
		args = append(args, "--redis-cluster", strings.Join(o.Cluster, ","))
	case len(o.Sentinels) > 0:
		args = append(args, "--redis-sentinels", strings.Join(o.Sentinels, ","), "--redis-master", o.MasterName)
	default:
		args = append(args, "--redis-addr", o.RedisAddr)
	}
	if o.MQTTURL != "" {
		args = append(args, "--mqtt-url", o.MQTTURL)
	} else {
		args = append(args, "--mqtt-listen", o.MQTTListen)
	}
	if o.Catalog != "" {
		args = append(args, "--catalog", o.Catalog)
	}
	args = append(args, o.Extra...)
	return &StoreServer{Proc: &Proc{Name: "store-server " + o.Store, Bin: bin, Args: args, Env: env,
		Log: filepath.Join(o.DataDir, "store-server.log")}, Opts: o, API: api, Broker: broker}
}

// Restart starts the (stopped or killed) store-server again and waits until it listens.
func (s *StoreServer) Restart(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addrs := []string{s.API}
	if s.Opts.MQTTURL == "" {
		addrs = append(addrs, s.Opts.MQTTListen)
	}
	return s.waitUp(ctx, addrs...)
}

// Manager returns a client of the store's manager API, with its token.
func (s *StoreServer) Manager() *client.Client {
	return &client.Client{BaseURL: "http://" + s.API, Token: s.Opts.Token}
}

// DutySupervisor is the supervisor AllowOfflineRefunds sets; a cashier whose Supervisor it
// is has each refund approved by it.
var DutySupervisor = agentclient.Supervisor{Name: "Duty manager", PIN: "246810"}

// AllowOfflineRefunds has the store allow refunds while a till cannot reach it, each
// approved by DutySupervisor, whom it sets up (the store publishes both to its tills).
func (s *StoreServer) AllowOfflineRefunds(ctx context.Context) error {
	m := s.Manager()
	if _, err := m.SetSupervisor(ctx, DutySupervisor.Name, DutySupervisor.PIN); err != nil {
		return fmt.Errorf("set supervisor: %w", err)
	}
	if _, err := m.SetRefundRules(ctx, client.RefundRules{Offline: true}); err != nil {
		return fmt.Errorf("set refund rules: %w", err)
	}
	return nil
}

// Call calls the manager API with a request as written, for what the client's methods do
// not send (a raw body, say); out, if not nil, receives the JSON answer.
func (s *StoreServer) Call(ctx context.Context, method, path, ctype string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.API+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.Opts.Token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// AgentOptions configure a terminal-agent process.
type AgentOptions struct {
	Store, Terminal string
	Broker          string
	DataDir         string
	TZ              string
	TokenFile       string   // --api-token-file; empty: the one the agent makes in DataDir
	Username        string   // the till's MQTT account (--username), if the broker asks for one
	Password        string   // its password (POSGATE_MQTT_PASSWORD)
	Extra           []string // more flags
	Runner          *Runner  // runs a binary built for another platform; nil: the binary itself
	Env             []string // more environment
}

// Agent is a terminal-agent process.
type Agent struct {
	*Proc
	Opts  AgentOptions
	API   string
	Token string // the API token, read once the agent listens
}

// TokenPath is the file of the agent's API token.
func (o AgentOptions) TokenPath() string {
	if o.TokenFile != "" {
		return o.TokenFile
	}
	return filepath.Join(o.DataDir, "api-token")
}

// StartAgent starts a terminal-agent and waits until its API listens; like StartStore, it
// starts again on another port if its port was taken before it bound it.
func StartAgent(ctx context.Context, bin string, o AgentOptions) (*Agent, error) {
	if o.TZ == "" {
		o.TZ = "Asia/Shanghai"
	}
	if err := enrolAgent(o.Store, o.Terminal); err != nil {
		return nil, fmt.Errorf("enrol %s at store %s: %w", o.Terminal, o.Store, err)
	}
	for attempt := 1; ; attempt++ {
		api, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--store", o.Store, "--terminal", o.Terminal, "--broker", o.Broker, "--data-dir", o.DataDir,
			"--listen", api, "--tz", o.TZ, "--ack-timeout", "1s", "--heartbeat", "0", "--log-level", "warn"}, o.Extra...)
		if o.TokenFile != "" {
			args = append(args, "--api-token-file", o.TokenFile)
		}
		env := o.Env
		if o.Username != "" {
			args = append(args, "--username", o.Username)
		}
		if o.Password != "" {
			env = append(slices.Clip(env), "POSGATE_MQTT_PASSWORD="+o.Password)
		}
		a := &Agent{Proc: &Proc{Name: "terminal-agent " + o.Terminal, Bin: bin, Args: args, Env: env,
			Log: filepath.Join(o.DataDir, "agent.log"), Runner: o.Runner}, Opts: o, API: api}
		if err = a.Restart(ctx); err == nil || attempt == 5 || !portTaken(err) {
			return a, err
		}
	}
}

// Restart starts the agent again, waits until it listens, and reads its API token.
func (a *Agent) Restart(ctx context.Context) error {
	if err := a.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := a.waitUp(ctx, a.API); err != nil {
		return err
	}
	tok, err := agentclient.ReadToken(a.Opts.TokenPath())
	a.Token = tok
	return err
}

// Cashier returns a cashier of the agent, with its API token.
func (a *Agent) Cashier() *Cashier { return NewCashier(a.API, a.Token) }

// outboxFiles are the files of an agent's outbox database a backup holds: the database and
// its write-ahead log (the shared-memory index and the lock file are rebuilt on open).
var outboxFiles = []string{"outbox.db", "outbox.db-wal"}

// BackupOutbox copies the stopped agent's outbox database into dir, as a backup of the
// device taken at that moment would hold it.
func (a *Agent) BackupOutbox(dir string) error {
	if a.running() {
		return fmt.Errorf("%s: back up the outbox of a stopped agent", a.Name)
	}
	return copyFiles(a.Opts.DataDir, dir)
}

// RestoreOutbox puts the backup BackupOutbox took in dir in place of the stopped agent's
// outbox database (a device re-imaged from that backup): whatever the agent recorded since
// is gone.
func (a *Agent) RestoreOutbox(dir string) error {
	if a.running() {
		return fmt.Errorf("%s: restore the outbox of a stopped agent", a.Name)
	}
	for _, f := range append(outboxFiles, "outbox.db-shm") {
		if err := os.Remove(filepath.Join(a.Opts.DataDir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return copyFiles(dir, a.Opts.DataDir)
}

// copyFiles copies the outbox files present in src into dst.
func copyFiles(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, f := range outboxFiles {
		b, err := os.ReadFile(filepath.Join(src, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
