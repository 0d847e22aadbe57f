package history

import (
	"testing"
	"time"

	"github.com/posgate/posgate/store-server/client"
)

// TestRecorder: each sample holds the quantiles of the acks of its own interval, the ring
// keeps the last hour of samples, oldest first, and a till's figures stay as sampled.
func TestRecorder(t *testing.T) {
	r := New(time.Minute) // 60 samples an hour
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for i := 1; i <= 100; i++ {
		r.Acked(time.Duration(i) * time.Millisecond)
	}
	r.Record(t0, client.ModeRedis, map[string]Till{"T1": {Known: true, Events: 3, OldestMs: 1500}})
	r.Record(t0.Add(time.Minute), client.ModeDegraded, map[string]Till{"T1": {}})
	s := r.Samples()
	if len(s) != 2 || s[0].Acks != 100 || s[0].AckP50Ms != 50 || s[0].AckP99Ms != 99 || s[1].Acks != 0 || s[1].AckP99Ms != 0 {
		t.Fatalf("samples %+v", s)
	}
	if s[0].Tills["T1"] != (Till{Known: true, Events: 3, OldestMs: 1500}) || s[1].Tills["T1"].Known || s[1].Mode != client.ModeDegraded {
		t.Fatalf("tills %+v", s)
	}
	for i := 2; i < 200; i++ {
		r.Record(t0.Add(time.Duration(i)*time.Minute), client.ModeRedis, nil)
	}
	s = r.Samples()
	if len(s) != 60 || !s[0].At.Equal(t0.Add(140*time.Minute)) || !s[59].At.Equal(t0.Add(199*time.Minute)) {
		t.Fatalf("ring of %d samples, %v … %v", len(s), s[0].At, s[len(s)-1].At)
	}
}

// TestAcksReservoir: past maxAcks acks in an interval, the quantiles come from a uniform
// sample of them, close to the true ones.
func TestAcksReservoir(t *testing.T) {
	r := New(time.Second)
	for i := range 100000 {
		r.Acked(time.Duration(i%1000) * time.Millisecond)
	}
	r.Record(time.Now(), client.ModeRedis, nil)
	s := r.Samples()[0]
	if s.Acks != 100000 || s.AckP50Ms < 450 || s.AckP50Ms > 550 || s.AckP99Ms < 970 {
		t.Fatalf("sample %+v", s)
	}
}
