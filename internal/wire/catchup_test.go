package wire_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// A replayed event keeps its hash: Replay and LostFrom say how it is delivered, not what
// happened, and both are checked.
func TestReplayIsNotContent(t *testing.T) {
	at := time.Date(2026, 11, 29, 23, 59, 30, 0, time.FixedZone("CST", 8*3600))
	env := wire.NewEnvelope(wire.KindHeartbeat, "S1", "T01", 42, at, []byte(`{"backlog":0}`))
	env.Offline = true
	env.Replay = &wire.Replay{Status: wire.ReplayAccepted, FlowNo: 1017, BusinessDate: "2026-11-29"}
	env.LostFrom = 40
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.DecodeEnvelope(b)
	if err != nil {
		t.Fatalf("decode a replay: %v", err)
	}
	if got.Replay == nil || *got.Replay != *env.Replay || got.LostFrom != 40 || got.Hash != env.Hash {
		t.Fatalf("decoded %+v (replay %+v)", got, got.Replay)
	}
	for name, tc := range map[string]struct {
		edit func(e *wire.Envelope)
		code string
	}{
		"lost_from at seq":   {func(e *wire.Envelope) { e.LostFrom = 42 }, wire.CodeSeq},
		"lost_from negative": {func(e *wire.Envelope) { e.LostFrom = -1 }, wire.CodeSeq},
		"live replay":        {func(e *wire.Envelope) { e.Offline = false }, wire.CodePayload},
		"unknown status":     {func(e *wire.Envelope) { e.Replay.Status = "maybe" }, wire.CodePayload},
		"bad date":           {func(e *wire.Envelope) { e.Replay.BusinessDate = "29/11/2026" }, wire.CodePayload},
		"negative flow":      {func(e *wire.Envelope) { e.Replay.FlowNo = -3 }, wire.CodePayload},
	} {
		e := env
		r := *env.Replay
		e.Replay = &r
		tc.edit(&e)
		b, _ := json.Marshal(e)
		if _, err := wire.DecodeEnvelope(b); perr.As(err).Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}

func TestDecodeDown(t *testing.T) {
	b, err := wire.MarshalResend("S1", "T01", 7, 19)
	if err != nil {
		t.Fatal(err)
	}
	d, err := wire.DecodeDown(b)
	if err != nil || d.Resend == nil || d.Acks != nil || d.Resend.From != 7 || d.Resend.To != 19 || d.Resend.Terminal != "T01" {
		t.Fatalf("resend: %+v, %v", d, err)
	}
	acks, _ := json.Marshal(wire.Acks{V: 1, Kind: wire.KindAcks, Store: "S1", Terminal: "T01",
		Acks: []wire.Ack{{Seq: 1, Key: "T01:1", Status: wire.AckAccepted}}})
	if d, err := wire.DecodeDown(acks); err != nil || d.Acks == nil || len(d.Acks.Acks) != 1 {
		t.Fatalf("acks: %+v, %v", d, err)
	}
	for name, tc := range map[string]struct{ body, code string }{
		"backwards":     {`{"v":1,"kind":"resend","store":"S1","terminal":"T01","from_seq":9,"to_seq":8}`, wire.CodeSeq},
		"from zero":     {`{"v":1,"kind":"resend","store":"S1","terminal":"T01","from_seq":0,"to_seq":8}`, wire.CodeSeq},
		"unknown field": {`{"v":1,"kind":"resend","store":"S1","terminal":"T01","from_seq":1,"to_seq":8,"x":1}`, wire.CodeUnknownField},
		"version":       {`{"v":2,"kind":"resend","store":"S1","terminal":"T01","from_seq":1,"to_seq":8}`, wire.CodeVersion},
		"bad id":        {`{"v":1,"kind":"resend","store":"S 1","terminal":"T01","from_seq":1,"to_seq":8}`, wire.CodeID},
		"other kind":    {`{"v":1,"kind":"nudge","store":"S1","terminal":"T01","acks":[]}`, wire.CodeKind},
		"not json":      {`{"v":1,`, wire.CodeSyntax},
	} {
		if _, err := wire.DecodeDown([]byte(tc.body)); perr.As(err).Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}

func TestDecodeHQHeld(t *testing.T) {
	h, err := wire.DecodeHQHeld([]byte(`{"v":1,"store":"S1","through":"2026-11-29","at":"2026-11-30T09:00:00+08:00"}`))
	if err != nil || h.Store != "S1" || h.Through != "2026-11-29" {
		t.Fatalf("%+v %v", h, err)
	}
	for name, tc := range map[string]struct{ body, code string }{
		"bad day":       {`{"v":1,"store":"S1","through":"2026/11/29","at":"2026-11-30T09:00:00+08:00"}`, wire.CodePayload},
		"no day":        {`{"v":1,"store":"S1","at":"2026-11-30T09:00:00+08:00"}`, wire.CodePayload},
		"unknown field": {`{"v":1,"store":"S1","through":"2026-11-29","x":1}`, wire.CodeUnknownField},
		"version":       {`{"v":3,"store":"S1","through":"2026-11-29"}`, wire.CodeVersion},
		"bad store":     {`{"v":1,"store":"S/1","through":"2026-11-29"}`, wire.CodeID},
	} {
		if _, err := wire.DecodeHQHeld([]byte(tc.body)); perr.As(err).Code != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}
