package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// A store-server takes messages only of its enrolled terminals (--terminals, or the embedded
// broker's accounts, --mqtt-users) and refuses to start without a list. Unless a test gives
// one of those flags itself, StartStore enrols the store's tills in a terminals file of its
// own, beside the data directory: those of StoreOptions.Terminals, every agent StartAgent
// starts for the same store id, and those a test adds with Enrol (a test that publishes as
// terminals itself). The store looks at the file again at the first message of a terminal
// not on it, so a till enrolled before it starts is taken at its first message.

// enrolled is every store the harness keeps a terminals file of, by store id.
var enrolled = struct {
	sync.Mutex
	stores map[string][]*StoreServer
}{stores: map[string][]*StoreServer{}}

// ownsEnrolment reports whether the harness keeps the store's terminals file: the test gave
// neither --terminals nor --mqtt-users.
func ownsEnrolment(o StoreOptions) bool {
	for _, a := range o.Extra {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "terminals" || name == "mqtt-users") {
			return false
		}
	}
	return true
}

// terminalsFile is where the harness keeps the enrolled terminals of a store with dataDir.
func terminalsFile(dataDir string) string { return filepath.Clean(dataDir) + ".terminals" }

// enrolStore writes the first terminals file of a store the harness enrols for, and returns
// its path ("" if the test enrols its terminals itself).
func enrolStore(o StoreOptions) (string, error) {
	if !ownsEnrolment(o) {
		return "", nil
	}
	path := terminalsFile(o.DataDir)
	enrolled.Lock()
	defer enrolled.Unlock()
	return path, writeTerminals(path, o.Terminals)
}

// register has StartAgent enrol the agents of s's store id at s.
func register(s *StoreServer) {
	if s.terminals == "" {
		return
	}
	enrolled.Lock()
	defer enrolled.Unlock()
	enrolled.stores[s.Opts.Store] = append(enrolled.stores[s.Opts.Store], s)
}

// Enrol adds terminals to the store's enrolled terminals (the harness's terminals file), for
// a test that publishes as those terminals itself; StartAgent enrols its agents.
func (s *StoreServer) Enrol(terminals ...string) error {
	if s.terminals == "" {
		return nil // the test enrols its terminals itself (--terminals, --mqtt-users)
	}
	enrolled.Lock()
	defer enrolled.Unlock()
	return s.enrolLocked(terminals)
}

func (s *StoreServer) enrolLocked(terminals []string) error {
	b, err := os.ReadFile(s.terminals)
	if err != nil {
		return err
	}
	var have []string
	for _, line := range strings.Split(string(b), "\n") {
		if id, _, _ := strings.Cut(line, "#"); strings.TrimSpace(id) != "" {
			have = append(have, strings.TrimSpace(id))
		}
	}
	add := false
	for _, t := range terminals {
		if !slices.Contains(have, t) {
			have, add = append(have, t), true
		}
	}
	if !add {
		return nil
	}
	if err := writeTerminals(s.terminals, have); err != nil {
		return err
	}
	// The store looks at the file again for a terminal not on it once 50 ms have passed
	// since its last look (store-server/enrol): after this wait, the first message is taken.
	time.Sleep(enrolSettles)
	return nil
}

// enrolSettles is how long after a change of the terminals file a store surely takes the
// terminals it added.
const enrolSettles = 100 * time.Millisecond

// enrolAgent enrols an agent's terminal at every store of its store id whose terminals file
// the harness keeps and whose directory is still there (tests of one package may share a
// store id: a till enrolled at another test's store changes nothing there).
func enrolAgent(store, terminal string) error {
	enrolled.Lock()
	defer enrolled.Unlock()
	for _, s := range enrolled.stores[store] {
		if _, err := os.Stat(filepath.Dir(s.terminals)); err != nil {
			continue
		}
		if err := s.enrolLocked([]string{terminal}); err != nil {
			return err
		}
	}
	return nil
}

// writeTerminals replaces the terminals file whole (a store never reads half of it).
func writeTerminals(path string, terminals []string) error {
	tmp := path + ".new"
	body := "# the store's enrolled terminals, kept by posgate's test harness\n" + strings.Join(terminals, "\n") + "\n"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
