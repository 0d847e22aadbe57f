package outbox

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/wire"
)

// TestSupervisorLockOutlivesARestart: a supervisor locked after 5 wrong PINs is still
// locked when the agent starts again on its outbox; older settings never replace newer ones.
func TestSupervisorLockOutlivesARestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	cfg := Config{Store: "S1", Terminal: "T1", Now: func() time.Time { return now }}
	s, err := Open(ctx, path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := pinhash.Hash("482913")
	keep := func(s *Store, v int64, sv ...wire.Supervisor) bool {
		st := wire.Settings{V: wire.Version, Store: "S1", Version: v, Supervisors: sv}
		b, _ := json.Marshal(st)
		ok, err := s.ReplaceSettings(ctx, st, b)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !keep(s, 5, wire.Supervisor{Name: "Wang", PINHash: h}) || keep(s, 4) || keep(s, 5) {
		t.Fatal("settings kept out of version order")
	}
	if got, ok, _ := s.Settings(ctx); !ok || got.Version != 5 || len(got.Supervisors) != 1 {
		t.Fatalf("settings held: %+v", got)
	}
	for i := 0; i < MaxPINFailures; i++ {
		s.Approve(ctx, "Wang", "000000")
	}
	s.Close()
	s, err = Open(ctx, path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now = now.Add(10 * time.Second)
	if _, err := s.Approve(ctx, "Wang", "482913"); perr.CodeOf(err) != CodeSupervisorLocked ||
		perr.As(err).RetryAfter != FirstLock-10*time.Second {
		t.Fatalf("after a restart: %v, want %s for %v", err, CodeSupervisorLocked, FirstLock-10*time.Second)
	}
	now = now.Add(FirstLock)
	if name, err := s.Approve(ctx, "Wang", "482913"); err != nil || name != "Wang" {
		t.Fatalf("after the lock: %q %v", name, err)
	}
}
