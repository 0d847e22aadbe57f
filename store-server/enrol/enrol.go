// Package enrol is the store's list of its enrolled terminals: the terminals of the broker's
// accounts (users.json) and those of a terminals file (--terminals: one id a line, # starts
// a comment), read again when the file changes. An up, status or backlog message of a
// terminal not on the list goes no further: no ledger row, no seq gap, no presence entry, no
// metric label; it is booked as terminal_unknown (counted, logged at most once in a while)
// and not acked, so that a till not yet enrolled keeps its events until it is.
package enrol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/refusals"
	"github.com/posgate/posgate/internal/wire"
)

// CodeTerminalUnknown is the refusal of a message of a terminal not enrolled.
const CodeTerminalUnknown = "terminal_unknown"

// recheck is how often the terminals file is looked at (its size and time) at most while
// the terminals that send are on it; missRecheck how soon it is looked at again for a
// terminal not on it, so that a till enrolled a moment before it connects is taken at its
// first message (a stranger's flood makes at most one look in missRecheck).
const (
	recheck     = time.Second
	missRecheck = 50 * time.Millisecond
)

// List is the enrolled terminals. A nil *List, or one with nothing to enrol from, is open:
// every terminal is welcome; the store-server refuses to start with such a list, and only
// its in-process tests of other jobs run one.
type List struct {
	path     string
	accounts map[string]bool
	book     *refusals.Book
	log      *slog.Logger

	mu      sync.Mutex
	file    map[string]bool
	stamp   string    // the file's size and modification time when read
	readAt  time.Time // when the file was last read
	checked time.Time // when the file was last looked at
	failed  string    // the last failure to read it again, logged once ("": none)
}

// New returns the list of the accounts' terminals and those of the file at path ("" for
// none), booking refusals in book. A file that cannot be read, or names an invalid id, is
// an error.
func New(path string, accounts []string, book *refusals.Book, log *slog.Logger) (*List, error) {
	l := &List{path: path, accounts: map[string]bool{}, book: book, log: log}
	for _, t := range accounts {
		l.accounts[t] = true
	}
	if path != "" {
		if err := l.reload(0); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Open reports whether every terminal is welcome: no accounts and no terminals file.
func (l *List) Open() bool { return l == nil || (l.path == "" && len(l.accounts) == 0) }

// Enrolled reports whether terminal may send to the store.
func (l *List) Enrolled(terminal string) bool {
	if l.Open() || l.accounts[terminal] {
		return true
	}
	if l.path == "" {
		return false
	}
	l.keep(l.reload(recheck))
	l.mu.Lock()
	on := l.file[terminal]
	l.mu.Unlock()
	if on {
		return true
	}
	l.keep(l.reload(missRecheck))
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.file[terminal]
}

// Count returns how many terminals are enrolled (accounts and file, once each).
func (l *List) Count() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.accounts)
	for t := range l.file {
		if !l.accounts[t] {
			n++
		}
	}
	return n
}

// keep logs a failure to read the file again (the list read before stays), each failure
// once until the file is read again or fails otherwise.
func (l *List) keep(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	l.mu.Lock()
	same := msg == l.failed
	l.failed = msg
	l.mu.Unlock()
	if err != nil && !same {
		l.log.Error("terminals file: keeping the list read before", "path", l.path, "err", err)
	}
}

// racyWindow is how long after a file's modification time a read of it may have missed a
// change of the same size within the same clock tick (2 s: FAT's times, the coarsest).
const racyWindow = 2 * time.Second

// reload reads the file again if it changed, looked at no more than once in every (0: now).
func (l *List) reload(every time.Duration) error {
	l.mu.Lock()
	if every > 0 && time.Since(l.checked) < every {
		failed := l.failed
		l.mu.Unlock()
		if failed != "" {
			return errors.New(failed) // not looked at again: the same failure
		}
		return nil
	}
	l.checked = time.Now()
	l.mu.Unlock()
	fi, err := os.Stat(l.path)
	if err != nil {
		return err
	}
	stamp := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	l.mu.Lock()
	// The same size and time say the same content only for a file last changed well before
	// it was read: one rewritten in the clock tick of that read (the same size, the same
	// time) would look unchanged, so such a file is read again until a read is clear of it.
	same := stamp == l.stamp && fi.ModTime().Before(l.readAt.Add(-racyWindow))
	l.mu.Unlock()
	if same {
		return nil
	}
	readAt := time.Now()
	b, err := os.ReadFile(l.path)
	if err != nil {
		return err
	}
	set, err := Parse(b)
	if err != nil {
		return fmt.Errorf("%s: %w", l.path, err)
	}
	l.mu.Lock()
	changed := !maps.Equal(set, l.file)
	l.file, l.stamp, l.readAt = set, stamp, readAt
	l.mu.Unlock()
	if every > 0 && changed {
		l.log.Info("terminals file read again", "path", l.path, "terminals", len(set))
	}
	return nil
}

// Parse reads a terminals file: one terminal id a line; blanks around it, empty lines and
// what follows a # are ignored.
func Parse(b []byte) (map[string]bool, error) {
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if !wire.ValidID(line) {
			return nil, fmt.Errorf("line %d: %q is not a terminal id (1-%d characters of A-Z a-z 0-9 _ -)", n, line, wire.MaxIDLen)
		}
		set[line] = true
	}
	return set, sc.Err()
}

// terminalOf is the terminal a store topic names (pos/<store>/<terminal>/<leaf>).
func terminalOf(topic string) string {
	parts := strings.SplitN(topic, "/", 4)
	if len(parts) < 4 {
		return ""
	}
	return parts[2]
}

// allows reports whether the message on topic may go on, booking it if not.
func (l *List) allows(topic string) bool {
	if l.Open() {
		return true
	}
	t := terminalOf(topic)
	if t != "" && l.Enrolled(t) {
		return true
	}
	// The terminal's name is logged (quoted by the logger), never made a metric label.
	if len(topic) > 120 {
		topic = topic[:120] + "…"
	}
	l.book.Note(slog.LevelWarn, CodeTerminalUnknown, "message of a terminal not enrolled: dropped, not acked",
		"topic", topic)
	return false
}

// Up wraps the handler of up messages: a message of a terminal not enrolled goes no further.
func (l *List) Up(next func(topic string, payload []byte)) func(topic string, payload []byte) {
	return func(topic string, payload []byte) {
		if l.allows(topic) {
			next(topic, payload)
		}
	}
}

// Status wraps the handler of status and backlog messages likewise.
func (l *List) Status(next func(topic string, payload []byte, retained bool)) func(topic string, payload []byte, retained bool) {
	return func(topic string, payload []byte, retained bool) {
		if l.allows(topic) {
			next(topic, payload, retained)
		}
	}
}
