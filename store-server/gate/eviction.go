package gate

import (
	"context"
	"fmt"
	"strings"

	"github.com/posgate/posgate/internal/perr"
)

// CodeEvictionPolicy (perr.Invalid) refuses a Redis whose maxmemory-policy may evict any
// key (allkeys-*): it would drop the projection's stock, counters and marker under memory
// pressure, and every drop costs a rebuild that the next eviction undoes.
const CodeEvictionPolicy = "redis_eviction_policy"

// Eviction is what CheckEviction found of the Redis server's maxmemory-policy.
type Eviction struct {
	Policy string // e.g. noeviction, volatile-lru; "" when it could not be read
	// Source is where Policy was read: "config" (CONFIG GET), "info" (INFO memory, when
	// CONFIG is renamed or denied), or "" when neither answered; Why then says why.
	Source string
	Why    string
}

// CheckEviction reads the server's maxmemory-policy: CONFIG GET, or INFO memory where
// CONFIG is renamed or denied (managed Redis services do). It returns a perr.Invalid error
// of code CodeEvictionPolicy for an allkeys-* policy. When neither command answers, it
// returns no error and says why in Eviction.Why: the store proceeds, and the projection
// marker and the drift audit catch keys Redis drops. An unreachable Redis is
// perr.Unavailable.
func (g *Gate) CheckEviction(ctx context.Context) (Eviction, error) {
	var e Eviction
	m, cfgErr := g.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if p, ok := m["maxmemory-policy"]; cfgErr == nil && ok {
		e.Policy, e.Source = p, "config"
	} else {
		if cfgErr == nil {
			cfgErr = fmt.Errorf("the answer names no maxmemory-policy")
		}
		if err := g.fail("config get maxmemory-policy", cfgErr); perr.KindOf(err) == perr.Unavailable {
			return e, err
		}
		info, err := g.rdb.Info(ctx, "memory").Result()
		if err != nil {
			if err := g.fail("info memory", err); perr.KindOf(err) == perr.Unavailable {
				return e, err
			}
			e.Why = fmt.Sprintf("CONFIG GET maxmemory-policy failed (%v) and INFO memory failed (%v)", cfgErr, err)
			return e, nil
		}
		for line := range strings.Lines(info) {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
				e.Policy, e.Source = p, "info"
			}
		}
		if e.Policy == "" {
			e.Why = fmt.Sprintf("CONFIG GET maxmemory-policy failed (%v) and INFO memory names no maxmemory_policy", cfgErr)
			return e, nil
		}
		e.Why = fmt.Sprintf("CONFIG GET maxmemory-policy failed (%v); read from INFO memory", cfgErr)
	}
	if strings.HasPrefix(e.Policy, "allkeys-") {
		return e, perr.New(perr.Invalid, CodeEvictionPolicy,
			"redis maxmemory-policy is %s: Redis may evict the store's stock, counters and projection marker at any time; "+
				"the gate refuses it and the store sells on the ledger alone until the policy is noeviction or volatile-* "+
				"(CONFIG SET maxmemory-policy noeviction, and in redis.conf)", e.Policy)
	}
	return e, nil
}
