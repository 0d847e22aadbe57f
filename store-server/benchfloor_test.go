package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/broker"
)

// echoEnv, set to a listen address, makes this test binary an echo server instead of
// running tests (see TestMain): the floor under the live benchmark.
const echoEnv = "POSGATE_BENCH_ECHO"

func TestMain(m *testing.M) {
	if addr := os.Getenv(echoEnv); addr != "" {
		os.Exit(runEcho(addr))
	}
	os.Exit(m.Run())
}

// runEcho runs the store-server's embedded broker on addr and acks every live event the
// moment it arrives: decoded as ingest decodes an up message, its ack encoded and
// published as ingest publishes acks, with no gate, no ledger and no commit in between.
// It serves until its standard input closes.
func runEcho(addr string) int {
	var b *broker.Broker
	var err error
	b, err = broker.Start(broker.Config{Addr: addr, Store: benchStoreID, Logger: slog.New(slog.DiscardHandler),
		OnUp: func(topic string, payload []byte) {
			up, err := wire.DecodeUp(payload)
			if err != nil {
				return
			}
			acks := make([]wire.Ack, 0, len(up.Items))
			for _, it := range up.Items {
				if it.Err != nil {
					continue
				}
				if _, err := wire.DecodePayload(it.Env); err != nil {
					continue
				}
				acks = append(acks, wire.Ack{Seq: it.Env.Seq, Key: wire.Key(it.Env.Terminal, it.Env.Seq),
					Status: wire.AckAccepted, Live: true})
			}
			body, err := json.Marshal(wire.Acks{V: wire.Version, Kind: wire.KindAcks, Store: up.Store,
				Terminal: up.Terminal, Acks: acks})
			if err == nil {
				_ = b.Publish(wire.DownTopic(up.Store, up.Terminal), body)
			}
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		return 1
	}
	io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
	b.Close()
	return 0
}

// BenchmarkE2ELiveAckFloor is the floor under BenchmarkE2ELiveAckLatency on this machine in
// these minutes: the same load generator against the same embedded broker, in a process of
// its own (GOGC=400, as the store-server runs), that acks each sale the moment it arrives
// (runEcho). What the live benchmark's latency has above this floor is the store's own
// work; run the two alternately to compare them (docs/benchmarks.md):
//
//	go test -run '^$' -bench 'E2ELiveAckFloor/rate=5000' -benchtime 1x ./store-server/
func BenchmarkE2ELiveAckFloor(b *testing.B) {
	for _, rate := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			addr, err := e2e.FreeAddr()
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), echoEnv+"="+addr, "GOGC=400")
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				stdin.Close()
				cmd.Wait()
			}()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("the echo server did not start")
				}
			}
			for b.Loop() {
				var echo0, bench0 time.Duration
				var at time.Time
				var echoCPU, benchCPU float64
				run := runLiveLoad(b, "tcp://"+addr, fmt.Sprintf("F%d-%d", rate, liveRuns.Add(1)), rate,
					func() { echo0, bench0, at = cpuOf(cmd.Process.Pid), cpuOf(os.Getpid()), time.Now() },
					func() {
						wall := time.Since(at).Seconds()
						echoCPU = 100 * (cpuOf(cmd.Process.Pid) - echo0).Seconds() / wall
						benchCPU = 100 * (cpuOf(os.Getpid()) - bench0).Seconds() / wall
					})
				b.ReportMetric(pct(run.lats, 0.50), "p50-ms")
				b.ReportMetric(pct(run.lats, 0.95), "p95-ms")
				b.ReportMetric(pct(run.lats, 0.99), "p99-ms")
				b.ReportMetric(pct(run.lats, 1), "max-ms")
				b.ReportMetric(float64(run.total)/run.published.Seconds(), "offered/s")
				b.ReportMetric(echoCPU, "echo-cpu%")
				b.ReportMetric(benchCPU, "bench-cpu%")
			}
		})
	}
}
