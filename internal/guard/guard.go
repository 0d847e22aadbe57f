// Package guard makes guessing a credential slow: each key (an account, a client address)
// may fail a few times freely, then waits a delay that doubles with each further failure,
// up to a ceiling, and is forgiven after a quiet while or a success. The MQTT broker's
// logins, the manager API's token and HQ's signatures each keep one.
//
// A guard holds a bounded number of keys: under a flood of keys it forgets the oldest, so
// memory stays bounded while an address that keeps failing keeps its own count.
package guard

import (
	"sync"
	"time"
)

// Config tunes a guard; zero fields take the defaults.
type Config struct {
	Free    int           // failures before the first wait (5)
	Base    time.Duration // the first wait (1s)
	Max     time.Duration // the longest wait (5m)
	Forgive time.Duration // a key quiet this long starts over (15m)
	Keys    int           // keys remembered at once (10,000)
	Now     func() time.Time
}

// Guard counts failures per key.
type Guard struct {
	cfg  Config
	mu   sync.Mutex
	keys map[string]*entry
	// order is the keys from the least recently failed; a key may stand in it more than
	// once (each failure appends it), the entry's seq says which stand is current.
	order []stand
	seq   uint64
}

type entry struct {
	fails int
	last  time.Time // the last failure
	until time.Time // no attempt before
	seq   uint64
}

type stand struct {
	key string
	seq uint64
}

// New returns a guard.
func New(cfg Config) *Guard {
	if cfg.Free <= 0 {
		cfg.Free = 5
	}
	if cfg.Base <= 0 {
		cfg.Base = time.Second
	}
	if cfg.Max <= 0 {
		cfg.Max = 5 * time.Minute
	}
	if cfg.Forgive <= 0 {
		cfg.Forgive = 15 * time.Minute
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 10_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Guard{cfg: cfg, keys: map[string]*entry{}}
}

// Wait returns how long key must wait before its next attempt is heard (0: now). An
// attempt made while it waits is refused without being checked, and is not counted.
func (g *Guard) Wait(key string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.keys[key]
	if e == nil {
		return 0
	}
	now := g.cfg.Now()
	if now.Sub(e.last) >= g.cfg.Forgive {
		delete(g.keys, key)
		return 0
	}
	return max(0, e.until.Sub(now))
}

// Fail counts a failed attempt of key and returns the wait it now has before the next.
func (g *Guard) Fail(key string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	e := g.keys[key]
	if e == nil || now.Sub(e.last) >= g.cfg.Forgive {
		e = &entry{}
		g.keys[key] = e
	}
	e.fails++
	e.last = now
	g.seq++
	e.seq = g.seq
	g.order = append(g.order, stand{key, e.seq})
	var wait time.Duration
	if over := e.fails - g.cfg.Free; over > 0 {
		wait = g.cfg.Base
		for i := 1; i < over && wait < g.cfg.Max; i++ {
			wait *= 2
		}
		wait = min(wait, g.cfg.Max)
	}
	e.until = now.Add(wait)
	g.trim()
	return wait
}

// Succeed forgets key's failures.
func (g *Guard) Succeed(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.keys, key)
}

// trim forgets the least recently failed keys beyond cfg.Keys, and compacts order.
func (g *Guard) trim() {
	for len(g.keys) > g.cfg.Keys && len(g.order) > 0 {
		s := g.order[0]
		g.order = g.order[1:]
		if e := g.keys[s.key]; e != nil && e.seq == s.seq {
			delete(g.keys, s.key)
		}
	}
	if len(g.order) > 4*g.cfg.Keys {
		live := g.order[:0]
		for _, s := range g.order {
			if e := g.keys[s.key]; e != nil && e.seq == s.seq {
				live = append(live, s)
			}
		}
		g.order = live
	}
}

// Len returns how many keys the guard holds (for tests and metrics).
func (g *Guard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}
