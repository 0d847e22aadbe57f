package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// StoreOptions configure a store-server process.
type StoreOptions struct {
	Store      string
	DataDir    string
	TZ         string
	Sentinels  []string // or RedisAddr
	MasterName string
	RedisAddr  string
	MQTTURL    string // external broker; empty runs the embedded one on MQTTListen
	MQTTListen string // default: a free loopback port
	Token      string
	Catalog    string // a catalog file to import at start
	LogLevel   string
}

// StoreServer is a store-server process.
type StoreServer struct {
	*Proc
	Opts   StoreOptions
	API    string // host:port of the manager API
	Broker string // MQTT URL terminals connect to
}

// StartStore starts a store-server and waits until its API and broker listen.
func StartStore(ctx context.Context, bin string, o StoreOptions) (*StoreServer, error) {
	api, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	if o.Token == "" {
		o.Token = "manager-token"
	}
	if o.TZ == "" {
		o.TZ = "Asia/Shanghai"
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	broker := o.MQTTURL
	if broker == "" {
		if o.MQTTListen == "" {
			if o.MQTTListen, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		broker = "tcp://" + o.MQTTListen
	}
	args := []string{"--store", o.Store, "--data-dir", o.DataDir, "--tz", o.TZ, "--api-listen", api,
		"--api-token", o.Token, "--log-level", o.LogLevel}
	if len(o.Sentinels) > 0 {
		args = append(args, "--redis-sentinels", strings.Join(o.Sentinels, ","), "--redis-master", o.MasterName)
	} else {
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
	s := &StoreServer{Proc: &Proc{Name: "store-server " + o.Store, Bin: bin, Args: args,
		Log: filepath.Join(o.DataDir, "store-server.log")}, Opts: o, API: api, Broker: broker}
	return s, s.Restart(ctx)
}

// Restart starts the (stopped or killed) store-server again and waits until it listens.
func (s *StoreServer) Restart(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitListening(ctx, s.API); err != nil {
		return fmt.Errorf("%s (log %s): %w", s.Name, s.Log, err)
	}
	return nil
}

// Call calls the manager API; out, if not nil, receives the JSON answer.
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
	Extra           []string // more flags
}

// Agent is a terminal-agent process.
type Agent struct {
	*Proc
	Opts AgentOptions
	API  string
}

// StartAgent starts a terminal-agent and waits until its API listens.
func StartAgent(ctx context.Context, bin string, o AgentOptions) (*Agent, error) {
	api, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	if o.TZ == "" {
		o.TZ = "Asia/Shanghai"
	}
	args := append([]string{"--store", o.Store, "--terminal", o.Terminal, "--broker", o.Broker, "--data-dir", o.DataDir,
		"--listen", api, "--tz", o.TZ, "--ack-timeout", "1s", "--heartbeat", "0", "--log-level", "warn"}, o.Extra...)
	a := &Agent{Proc: &Proc{Name: "terminal-agent " + o.Terminal, Bin: bin, Args: args,
		Log: filepath.Join(o.DataDir, "agent.log")}, Opts: o, API: api}
	return a, a.Restart(ctx)
}

// Restart starts the agent again and waits until it listens.
func (a *Agent) Restart(ctx context.Context) error {
	if err := a.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitListening(ctx, a.API); err != nil {
		return fmt.Errorf("%s (log %s): %w", a.Name, a.Log, err)
	}
	return nil
}
