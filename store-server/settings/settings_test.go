package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/wire"
)

type pubs struct {
	got  [][]byte
	fail error
}

func (p *pubs) PublishRetained(topic string, payload []byte) error {
	if topic != wire.SettingsTopic("S1") {
		return errors.New("wrong topic " + topic)
	}
	if p.fail != nil {
		return p.fail
	}
	p.got = append(p.got, payload)
	return nil
}

// TestSettingsKeptAndPublished: each change is a higher version, saved (the PIN as its
// hash alone) and published; Open takes back what was saved; a restored older file still
// issues versions above those published since (the clock).
func TestSettingsKeptAndPublished(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, "S1")
	if err != nil || s.Current().Version != 0 {
		t.Fatalf("new settings: %+v %v", s.Current(), err)
	}
	p := &pubs{}
	if err := s.Publish(p); err != nil || len(p.got) != 0 {
		t.Fatalf("settings never set were published: %v", err)
	}
	a, err := s.SetSupervisor("Wang Li", "482913", p)
	if err != nil {
		t.Fatal(err)
	}
	above := money.Fen(50000)
	b, err := s.SetRefunds(&above, true, p)
	if err != nil || b.Version <= a.Version || len(p.got) != 2 {
		t.Fatalf("refund rules: %+v %v (versions %d, %d)", b, err, a.Version, b.Version)
	}
	file, _ := os.ReadFile(path)
	if strings.Contains(string(file), "482913") || strings.Contains(string(p.got[1]), "482913") {
		t.Fatal("the PIN is kept or published as text")
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("settings file mode %v", info.Mode())
	}
	pub, err := wire.DecodeSettings(p.got[1])
	if err != nil || pub.Version != b.Version || !pub.OfflineRefunds || *pub.RefundSupervisorAbove != above {
		t.Fatalf("published %+v %v", pub, err)
	}
	if ok, _ := pinhash.Verify(pub.Supervisors[0].PINHash, "482913"); !ok {
		t.Fatal("the published hash does not take the PIN")
	}
	again, err := Open(path, "S1")
	if err != nil || again.Current().Version != b.Version || len(again.Current().Supervisors) != 1 {
		t.Fatalf("reopened %+v %v", again.Current(), err)
	}
	// The clock stopped behind the last version: the next is still above it.
	again.now = func() time.Time { return time.UnixMilli(1) }
	c, err := again.RemoveSupervisor("Wang Li", p)
	if err != nil || c.Version != b.Version+1 || len(c.Supervisors) != 0 {
		t.Fatalf("remove: %+v %v", c, err)
	}
	if _, err := Open(path, "S2"); err == nil {
		t.Fatal("another store's settings were taken")
	}
}

// TestSettingsRefused: a bad name, a bad PIN, an unknown supervisor or a negative threshold
// change nothing and publish nothing; a broker that does not take them leaves them saved.
func TestSettingsRefused(t *testing.T) {
	s, _ := Open(filepath.Join(t.TempDir(), FileName), "S1")
	p := &pubs{}
	neg := money.Fen(-1)
	for _, c := range []struct {
		err  error
		code string
	}{
		{func() error { _, err := s.SetSupervisor("", "482913", p); return err }(), CodeNameInvalid},
		{func() error { _, err := s.SetSupervisor(" Wang", "482913", p); return err }(), CodeNameInvalid},
		{func() error { _, err := s.SetSupervisor("Wang", "1234", p); return err }(), pinhash.CodePINInvalid},
		{func() error { _, err := s.SetSupervisor("Wang", "12345a", p); return err }(), pinhash.CodePINInvalid},
		{func() error { _, err := s.RemoveSupervisor("Nobody", p); return err }(), CodeNotFound},
		{func() error { _, err := s.SetRefunds(&neg, false, p); return err }(), CodeThresholdInvalid},
	} {
		if perr.CodeOf(c.err) != c.code {
			t.Errorf("%v, want %s", c.err, c.code)
		}
	}
	if s.Current().Version != 0 || len(p.got) != 0 {
		t.Fatalf("a refused change left %+v, published %d", s.Current(), len(p.got))
	}
	p.fail = errors.New("broker away")
	cur, err := s.SetSupervisor("Wang", "482913", p)
	var np *NotPublishedError
	if !errors.As(err, &np) || cur.Version == 0 || s.Current().Version != cur.Version {
		t.Fatalf("broker away: %+v %v", cur, err)
	}
}
