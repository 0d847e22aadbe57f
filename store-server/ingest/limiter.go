package ingest

import (
	"sync"
	"time"

	"github.com/posgate/posgate/store-server/store"
)

// localLimiter is the in-process, conservative stand-in for the Redis limiter while Redis is
// unreachable: the same three layers (store, terminal, action) as sliding-window logs, all
// checked before any is recorded, at half the store's limits in force (store.Policy.Degraded).
// It also holds the store's policy for ingest: the ledger's, as last read or set.
type localLimiter struct {
	mu    sync.Mutex
	pol   store.Policy
	isSet bool // pol is the ledger's, read or set, not the defaults it starts with
	logs  map[string][]time.Time
}

func newLocalLimiter(p store.Policy) *localLimiter {
	return &localLimiter{pol: p, logs: map[string][]time.Time{}}
}

// known returns the store's policy the limiter holds to, and whether it is the ledger's.
func (l *localLimiter) known() (store.Policy, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pol, l.isSet
}

// set has the limiter hold to p from now on, with the entries already in its windows.
func (l *localLimiter) set(p store.Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pol, l.isSet = p, true
}

// allow checks and records one live event of action for terminal at now. When refused it
// returns how long until the refusing layer has room again.
func (l *localLimiter) allow(now time.Time, terminal, action string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.pol.Degraded(now)
	window := time.Duration(lim.WindowMs) * time.Millisecond
	layers := []struct {
		key   string
		limit int64
	}{
		{"s", lim.Store},
		{"t:" + terminal, lim.Terminal},
		{"a:" + terminal + ":" + action, lim.Action(action)},
	}
	var retry time.Duration
	for _, ly := range layers {
		log := l.trim(ly.key, now.Add(-window))
		if int64(len(log)) >= ly.limit {
			if wait := log[0].Add(window).Sub(now); wait > retry {
				retry = wait
			}
		}
	}
	if retry > 0 {
		return retry, false
	}
	for _, ly := range layers {
		l.logs[ly.key] = append(l.logs[ly.key], now)
	}
	return 0, true
}

// trim drops entries older than since and returns what is left.
func (l *localLimiter) trim(key string, since time.Time) []time.Time {
	log := l.logs[key]
	i := 0
	for i < len(log) && !log[i].After(since) {
		i++
	}
	log = log[i:]
	l.logs[key] = log
	return log
}
