package api_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/pinhash"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// wang is the supervisor the test store names, with the right PIN; li is another one.
var (
	wang = client.Supervisor{Name: "Wang", PIN: "482913"}
	li   = client.Supervisor{Name: "Li", PIN: "735106"}
)

// hashes are the supervisors' PIN hashes, made once. They are argon2id hashes as the store
// publishes them, at the least cost the wire's bounds allow: these tests check the rules of
// approvals (the agent verifies a PIN for each), not argon2id's cost, which pinhash's tests
// hold; at pinhash.Hash's cost a PIN takes about 50 ms to verify here.
var hashes = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	for _, sv := range []client.Supervisor{wang, li} {
		out[sv.Name] = cheapPINHash(sv.PIN)
	}
	return out
})

// cheapPINHash is the argon2id pin_hash of pin with 8 KiB and one pass.
func cheapPINHash(pin string) string {
	const memory, passes, lanes = 8, 1, 1
	salt := make([]byte, pinhash.SaltLen)
	rand.Read(salt)
	key := argon2.IDKey([]byte(pin), salt, passes, memory, lanes, pinhash.KeyLen)
	enc := base64.RawStdEncoding
	h := fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", wire.PINHashVersion, memory, passes, lanes,
		enc.EncodeToString(salt), enc.EncodeToString(key))
	if err := pinhash.Check(h); err != nil {
		panic(fmt.Sprintf("%s: %v", h, err))
	}
	return h
}

var settingsVersion struct {
	sync.Mutex
	n int64
}

// setSettings gives the agent's outbox the store's settings as the uplink keeps them: Wang
// and Li as supervisors, edited by edit.
func setSettings(t testing.TB, store *outbox.Store, edit func(*wire.Settings)) {
	t.Helper()
	settingsVersion.Lock()
	settingsVersion.n++
	v := settingsVersion.n
	settingsVersion.Unlock()
	st := wire.Settings{V: wire.Version, Store: "S1", Version: v, Supervisors: []wire.Supervisor{
		{Name: wang.Name, PINHash: hashes()[wang.Name]}, {Name: li.Name, PINHash: hashes()[li.Name]}}}
	if edit != nil {
		edit(&st)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.ReplaceSettings(context.Background(), st, b); err != nil || !ok {
		t.Fatalf("settings not kept: %v", err)
	}
}

func svJSON(sv client.Supervisor) string {
	b, _ := json.Marshal(sv)
	return string(b)
}

// TestForgedSupervisor: a reopen or a refund approved by a name the store did not set, by a
// wrong PIN, or by a supervisor locked after wrong PINs, is refused with its code and does
// nothing; a refund above the store's threshold, or one made offline, is refused without a
// supervisor. The outbox's events, sales, refunds, closes and requests stay as they were.
func TestForgedSupervisor(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	above := money.Fen(2000)
	setSettings(t, a.store, func(s *wire.Settings) { s.RefundSupervisorAbove, s.OfflineRefunds = &above, true })
	small := a.openSale()
	a.addLine(small, "MILK", 1) // 12.50: under the threshold
	a.pay(small, cash("20.00"))
	big := a.openSale()
	a.addLine(big, "MILK", 2) // 25.00: over it
	a.pay(big, cash("30.00"))
	a.dayClose("2026-11-28") // yesterday, closed by name: today's refunds go on
	reopen := func(sv string) string {
		return `{"business_date":"2026-11-28","reason":"closed by mistake"` + sv + `}`
	}
	refund := func(id, sv string) string { return `{"sale_id":"` + id + `"` + sv + `}` }
	forged := func(name, pin string) string {
		return `,"supervisor":` + svJSON(client.Supervisor{Name: name, PIN: pin})
	}
	a.refuseAll(t, []hostile{
		{"reopen without a supervisor", "POST", "/v1/day-close/reopen", reopen(""), nil, 403, outbox.CodeSupervisorRequired},
		{"reopen by an unknown name", "POST", "/v1/day-close/reopen", reopen(forged("anyone", "482913")), nil, 403, outbox.CodeSupervisorUnknown},
		{"reopen by a free-text name", "POST", "/v1/day-close/reopen", reopen(`,"supervisor":"anyone"`), nil, 400, "json_type"},
		{"reopen by a wrong PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", "000000")), nil, 403, outbox.CodeSupervisorPINWrong},
		{"reopen by another's PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", li.PIN)), nil, 403, outbox.CodeSupervisorPINWrong},
		{"reopen by an empty PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", "")), nil, 403, outbox.CodeSupervisorPINWrong},
		{"refund above the threshold", "POST", "/v1/refunds", refund(big, ""), nil, 403, outbox.CodeSupervisorRequired},
		{"offline refund without a supervisor", "POST", "/v1/refunds", refund(small, ""), nil, 403, outbox.CodeSupervisorRequired},
		{"refund by a wrong PIN", "POST", "/v1/refunds", refund(small, forged("Li", "111111")), nil, 403, outbox.CodeSupervisorPINWrong},
		{"refund by an unknown name", "POST", "/v1/refunds", refund(big, forged("Zhao", "482913")), nil, 403, outbox.CodeSupervisorUnknown},
	})
	// Wang has 3 wrong PINs; 2 more lock Wang out, and then the right PIN is refused too,
	// with the time to wait. Li is not locked by Wang's failures.
	a.refuseAll(t, []hostile{
		{"4th wrong PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", "123456")), nil, 403, outbox.CodeSupervisorPINWrong},
		{"5th wrong PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", "123457")), nil, 403, outbox.CodeSupervisorPINWrong},
		{"locked, the right PIN", "POST", "/v1/day-close/reopen", reopen(forged("Wang", wang.PIN)), nil, 429, outbox.CodeSupervisorLocked},
		{"locked, a refund", "POST", "/v1/refunds", refund(big, forged("Wang", wang.PIN)), nil, 429, outbox.CodeSupervisorLocked},
	})
	r := a.send(hostile{name: "locked again", method: "POST", path: "/v1/day-close/reopen", body: reopen(forged("Wang", wang.PIN))})
	var e client.ErrorBody
	r.json(t, &e)
	if e.RetryAfterMs <= 0 || e.RetryAfterMs > outbox.FirstLock.Milliseconds() || !strings.Contains(e.Message, "Wang") {
		t.Fatalf("a locked supervisor's answer: %s; want retry_after_ms up to %d", r.Body, outbox.FirstLock.Milliseconds())
	}
	// The lock, kept in the outbox, ends with its time; Li was never locked.
	a.clock.Add(outbox.FirstLock)
	ok := a.send(hostile{name: "li approves", method: "POST", path: "/v1/refunds", body: refund(big, `,"supervisor":`+svJSON(li))})
	if ok.Status != http.StatusCreated {
		t.Fatalf("Li's approval: %d %s", ok.Status, ok.Body)
	}
	var ra client.RefundAnswer
	ok.json(t, &ra)
	if ra.Refund.ApprovedBy != "Li" || ra.Refund.Amount != 2500 || strings.Contains(string(ok.Body), li.PIN) {
		t.Fatalf("the refund approved by Li: %s", ok.Body)
	}
	evs, err := a.store.Pending(context.Background(), ra.Event.Seq-1, 1)
	if err != nil || len(evs) != 1 || evs[0].Seq != ra.Event.Seq {
		t.Fatalf("the refund's event: %+v %v", evs, err)
	}
	body := evs[0].Payload
	var p wire.RefundPayload
	if err := json.Unmarshal(body, &p); err != nil || p.ApprovedBy != "Li" || strings.Contains(string(body), li.PIN) {
		t.Fatalf("the refund event: %s (%v); want approved_by Li and no PIN", body, err)
	}
	if dump := a.dump(); strings.Contains(dump, li.PIN) || strings.Contains(dump, wang.PIN) {
		t.Fatal("a PIN is kept in the outbox")
	}
	ro := a.send(hostile{name: "wang reopens", method: "POST", path: "/v1/day-close/reopen", body: reopen(`,"supervisor":` + svJSON(wang))})
	var rr client.DayReopenAnswer
	ro.json(t, &rr)
	if ro.Status != 200 || rr.Reopen.Supervisor != "Wang" {
		t.Fatalf("Wang's reopen after the lock: %d %s", ro.Status, ro.Body)
	}
}

// TestSupervisorLockGrows: after 5 wrong PINs in a row a supervisor is refused for 30 s,
// then twice as long after each further wrong PIN, at most an hour; the right PIN clears
// the count.
func TestSupervisorLockGrows(t *testing.T) {
	t.Parallel()
	a := newOfflineAgent(t, outbox.Caps{})
	ctx := context.Background()
	try := func(pin string) error {
		_, err := a.store.Approve(ctx, "Wang", pin)
		return err
	}
	for i := 1; i <= 4; i++ {
		if err := try("000000"); code(err) != outbox.CodeSupervisorPINWrong {
			t.Fatalf("wrong PIN %d: %v", i, err)
		}
	}
	if err := try(wang.PIN); err != nil {
		t.Fatalf("the right PIN after 4 wrong: %v", err)
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute}
	for i := 1; i <= 4; i++ { // counted from zero again
		try("000000")
	}
	for _, lock := range want {
		if err := try("000000"); code(err) != outbox.CodeSupervisorPINWrong || retryAfter(err) != lock {
			t.Fatalf("the wrong PIN that locks: %v (retry after %v), want a lock of %v", err, retryAfter(err), lock)
		}
		a.clock.Add(lock - time.Second)
		if err := try(wang.PIN); code(err) != outbox.CodeSupervisorLocked || retryAfter(err) != time.Second {
			t.Fatalf("locked for %v, a second before its end: %v (retry after %v)", lock, err, retryAfter(err))
		}
		a.clock.Add(time.Second)
	}
	if err := try(wang.PIN); err != nil {
		t.Fatalf("the right PIN once the lock is over: %v", err)
	}
	for i := 0; i < 20; i++ {
		try("000000")
		a.clock.Add(time.Hour)
	}
	if err := try("000000"); retryAfter(err) != outbox.MaxLock {
		t.Fatalf("after many wrong PINs the lock is %v, want at most %v", retryAfter(err), outbox.MaxLock)
	}
}

func code(err error) string { return perr.CodeOf(err) }

func retryAfter(err error) time.Duration {
	if err == nil {
		return 0
	}
	return perr.As(err).RetryAfter
}
