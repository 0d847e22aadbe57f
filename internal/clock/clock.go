// Package clock is the wall clock a posgate process takes "now" from for its business: the
// times it stamps on events, the business dates it takes from them, the windows and ages it
// keeps by them. It is the system clock, moved by an offset that a fault test can step while
// the process runs (an offset file, read again about once a second), so that a test can do to
// one process what a till's clock stepped by NTP, a dead clock battery or a hand setting it
// does, without touching the machine's clock.
//
// Timeouts and intervals measured while the process runs are not the clock's business: they
// take time.Now's monotonic reading, which no step of the wall clock moves.
package clock

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Reread is how often, at most, Now reads the offset file again.
const Reread = time.Second

// MaxOffset bounds an offset: a year either way.
const MaxOffset = 366 * 24 * time.Hour

// Clock is the system clock plus an offset. The zero Clock and a nil *Clock are the system
// clock.
type Clock struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	offset time.Duration
	read   time.Time // when the file was last read (monotonic); zero: never
	bad    string    // the last bad content logged, so that it is logged once
}

// New returns the system clock moved by the offset held in the file at path (none: the
// system clock as it is). The file holds a signed duration such as "+25m", "-3h" or
// "-1h30m"; a file that is absent or empty is no offset, and one that cannot be read as a
// duration (or is beyond MaxOffset) keeps the offset last read, and is logged once.
func New(path string, log *slog.Logger) *Clock {
	if log == nil {
		log = slog.Default()
	}
	return &Clock{path: path, log: log}
}

// Now returns the time now by this clock.
func (c *Clock) Now() time.Time {
	now := time.Now()
	if c == nil || c.path == "" {
		return now
	}
	return now.Add(c.Offset())
}

// Offset returns the clock's offset from the system clock, reading the file again if it was
// last read more than Reread ago.
func (c *Clock) Offset() time.Duration {
	if c == nil || c.path == "" {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && time.Since(c.read) < Reread {
		return c.offset
	}
	c.read = time.Now()
	b, err := os.ReadFile(c.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		b, err = nil, nil
	case err != nil:
		c.logBad(err.Error())
		return c.offset
	}
	off, err := ParseOffset(string(b))
	if err != nil {
		c.logBad(err.Error())
		return c.offset
	}
	if off != c.offset {
		c.log.Warn("clock offset changed (fault test)", "file", c.path, "from", c.offset, "to", off)
		c.offset = off
	}
	c.bad = ""
	return c.offset
}

func (c *Clock) logBad(msg string) {
	if msg != c.bad {
		c.log.Error("clock offset file unreadable; the offset last read stays", "file", c.path, "err", msg, "offset", c.offset)
		c.bad = msg
	}
}

// ParseOffset reads an offset: a signed Go duration ("+25m", "-3h", "90s"); blank is 0.
func ParseOffset(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock offset %q: want a signed duration such as +25m or -3h", s)
	}
	if d > MaxOffset || d < -MaxOffset {
		return 0, fmt.Errorf("clock offset %q: beyond %v either way", s, MaxOffset)
	}
	return d, nil
}

// FormatOffset writes an offset as ParseOffset reads it, with its sign.
func FormatOffset(d time.Duration) string {
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

// WriteOffset sets the offset of the clocks reading the file at path (they see it within
// Reread): written to a temporary file and renamed, so that no reader finds it half written.
func WriteOffset(path string, d time.Duration) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(FormatOffset(d)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
