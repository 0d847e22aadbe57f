package outbox

import (
	"log/slog"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/perr"
)

// storageLogEvery is how often a storage refusal (storage_full, storage_error) is logged at
// most; the line says how many were not logged since.
const storageLogEvery = 10 * time.Second

// storageLog logs the storage refusals of Do, each code at most once per storageLogEvery.
type storageLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
	n    map[string]int64 // refusals by code since the outbox opened
}

// note logs err if it is a storage refusal and its code was not logged lately.
func (s *Store) noteStorage(err error) {
	code := perr.CodeOf(err)
	if err == nil || (code != CodeStorageFull && code != CodeStorageError) {
		return
	}
	l := &s.storage
	l.mu.Lock()
	if l.last == nil {
		l.last, l.held, l.n = map[string]time.Time{}, map[string]int{}, map[string]int64{}
	}
	l.n[code]++
	now := time.Now()
	if last, ok := l.last[code]; ok && now.Sub(last) < storageLogEvery {
		l.held[code]++
		l.mu.Unlock()
		return
	}
	held := l.held[code]
	l.last[code], l.held[code] = now, 0
	l.mu.Unlock()
	log := s.cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Error("a request was refused: the terminal cannot record it", "code", code, "err", err, "not_logged_since", held)
}

// StorageRefusals returns how many requests were refused for storage since the outbox
// opened, by code.
func (s *Store) StorageRefusals() map[string]int64 {
	s.storage.mu.Lock()
	defer s.storage.mu.Unlock()
	out := map[string]int64{}
	for k, v := range s.storage.n {
		out[k] = v
	}
	return out
}
