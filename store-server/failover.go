package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sameSwitch is how long a +switch-master heard again (every Sentinel announces the same
// switch) is taken for the one already acted on.
const sameSwitch = 30 * time.Second

// watchFailover follows +switch-master on every Sentinel at once and calls rebuild once for
// each switch of master it hears of. Listening to one Sentinel at a time left the store deaf
// to failovers while that one was down: go-redis reconnects a subscription to the Sentinel
// it was made on, for as long as it takes. A switch missed here is still caught (the gate
// sees another server behind a new connection, gate.Connected), only later.
func watchFailover(ctx context.Context, addrs []string, master, password string, tlsCfg *tls.Config, rebuild func(), log *slog.Logger) {
	heard := make(chan string)
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			followSentinel(ctx, addr, password, tlsCfg, heard)
		}()
	}
	defer wg.Wait()
	var last string
	var lastAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case payload := <-heard:
			if !strings.HasPrefix(payload, master+" ") {
				continue
			}
			if payload == last && time.Since(lastAt) < sameSwitch {
				continue
			}
			last, lastAt = payload, time.Now()
			log.Warn("redis failover seen; rebuilding the projection", "switch", payload)
			rebuild()
		}
	}
}

// followSentinel hands every +switch-master the Sentinel at addr announces to heard until
// ctx is done. go-redis subscribes again after a lost connection, and pings a quiet one to
// find out.
func followSentinel(ctx context.Context, addr, password string, tlsCfg *tls.Config, heard chan<- string) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: password, TLSConfig: tlsCfg, DialTimeout: time.Second})
	defer sc.Close()
	sub := sc.Subscribe(ctx, "+switch-master")
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-ch:
			select {
			case heard <- msg.Payload:
			case <-ctx.Done():
				return
			}
		}
	}
}
