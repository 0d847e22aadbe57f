package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
)

// testPINHash is internal/pinhash's hash of the PIN 482913.
const testPINHash = "$argon2id$v=19$m=19456,t=2,p=1$/oJqJE/jRLYdBdrSMhtYqw$BL8GFmpZtejaEpsVPyqfqhB2T59+9zMNl7tX6Il89rI"

// TestSettingsRoundTrip: settings as the store publishes them decode to the same value,
// with the threshold as decimal text and the supervisors' hashes only.
func TestSettingsRoundTrip(t *testing.T) {
	h := testPINHash
	above := money.Fen(50000)
	s := Settings{V: Version, Store: "S1", Version: 7, Supervisors: []Supervisor{{Name: "Wang Li", PINHash: h}},
		RefundSupervisorAbove: &above, OfflineRefunds: true}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"refund_supervisor_above":"500.00"`) || strings.Contains(string(b), "482913") {
		t.Fatalf("settings as published: %s", b)
	}
	got, err := DecodeSettings(b)
	if err != nil || got.Version != 7 || *got.RefundSupervisorAbove != above || !got.OfflineRefunds ||
		len(got.Supervisors) != 1 || got.Supervisors[0] != s.Supervisors[0] {
		t.Fatalf("decoded %+v (%v)", got, err)
	}
	if sv, ok := got.Supervisor("Wang Li"); !ok || sv.PINHash != h {
		t.Fatal("Supervisor by name")
	}
	none, err := DecodeSettings([]byte(`{"v":1,"store":"S1","version":1,"supervisors":[],"offline_refunds":false}`))
	if err != nil || none.RefundSupervisorAbove != nil {
		t.Fatalf("settings with no threshold: %+v %v", none, err)
	}
}

// TestSettingsRefused: a settings message that is not well formed, or breaks a rule, is
// refused with a code, whole.
func TestSettingsRefused(t *testing.T) {
	h := testPINHash
	sv := `{"name":"Wang","pin_hash":"` + h + `"}`
	for body, code := range map[string]string{
		`{"v":2,"store":"S1","version":1,"supervisors":[]}`:                                        CodeVersion,
		`{"v":1,"store":"S 1","version":1,"supervisors":[]}`:                                       CodeID,
		`{"v":1,"store":"S1","version":0,"supervisors":[]}`:                                        CodePayload,
		`{"v":1,"store":"S1","version":1,"supervisors":[],"extra":1}`:                              CodeUnknownField,
		`{"v":1,"store":"S1","version":1,"supervisors":[` + sv + `,` + sv + `]}`:                   CodePayload,
		`{"v":1,"store":"S1","version":1,"supervisors":[{"name":"Wang","pin_hash":"482913"}]}`:     CodePayload,
		`{"v":1,"store":"S1","version":1,"supervisors":[{"name":"","pin_hash":"` + h + `"}]}`:      CodePayload,
		`{"v":1,"store":"S1","version":1,"supervisors":[{"name":" Wang","pin_hash":"` + h + `"}]}`: CodePayload,
		`{"v":1,"store":"S1","version":1,"supervisors":[{"name":"Wang","pin":"482913"}]}`:          CodeUnknownField,
		`{"v":1,"store":"S1","version":1,"supervisors":[],"refund_supervisor_above":"-1.00"}`:      "amount_not_positive",
		`{"v":1,"store":"S1","version":1,"supervisors":[],"refund_supervisor_above":"1.001"}`:      "amount_sub_fen",
		`{"v":1,"store":"S1","version":1,"supervisors":[],"refund_supervisor_above":100}`:          "amount_syntax",
		`{"v":1,"store":"S1","version":1,"supervisors":[],"offline_refunds":"yes"}`:                CodeType,
	} {
		_, err := DecodeSettings([]byte(body))
		if err == nil {
			t.Errorf("%s: taken", body)
			continue
		}
		if got := perr.CodeOf(err); got != code && !(code == "amount_not_positive" && got == CodeAmount) {
			t.Errorf("%s: %v, want code %s", body, err, code)
		}
	}
	if _, err := DecodeSettings(make([]byte, MaxSettingsBytes+1)); perr.CodeOf(err) != CodeOversize {
		t.Errorf("oversize settings: %v", err)
	}
}

// TestPINHashBounds: a pin_hash asking for more memory, passes or lanes than a till should
// spend, or malformed, is refused before any work.
func TestPINHashBounds(t *testing.T) {
	if _, err := ParsePINHash(testPINHash); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(testPINHash, "$")
	salt, key := parts[4], parts[5]
	for _, h := range []string{
		"", "123456", "$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=4194304,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=1000,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=255$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1,x=1$" + salt + "$" + key,
		"$argon2id$v=19$m=019456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "=$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$AAAA",
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key + "$",
	} {
		if _, err := ParsePINHash(h); err == nil {
			t.Errorf("ParsePINHash took %q", h)
		}
	}
}
