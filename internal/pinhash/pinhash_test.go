package pinhash

import (
	"strings"
	"testing"
	"time"
)

// TestHashVerify: a PIN matches its own hash and no other PIN does; two hashes of one PIN
// differ (salted); the hash holds nothing of the PIN as text.
func TestHashVerify(t *testing.T) {
	h, err := Hash("482913")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "482913") {
		t.Fatalf("hash %q", h)
	}
	start := time.Now()
	ok, err := Verify(h, "482913")
	t.Logf("one PIN checked in %v", time.Since(start))
	if err != nil || !ok {
		t.Fatalf("the right PIN: %v %v", ok, err)
	}
	for _, pin := range []string{"482914", "48291", "4829130", "", "abcdef", "482913 "} {
		if ok, err := Verify(h, pin); ok || err != nil {
			t.Errorf("PIN %q matched (%v)", pin, err)
		}
	}
	h2, _ := Hash("482913")
	if h2 == h {
		t.Fatal("two hashes of one PIN are equal: no salt")
	}
}

func TestValidPIN(t *testing.T) {
	for pin, ok := range map[string]bool{"123456": true, "123456789012": true, "12345": false, "1234567890123": false,
		"12345a": false, "１２３４５６": false, "": false, "-12345": false} {
		if (ValidPIN(pin) == nil) != ok {
			t.Errorf("ValidPIN(%q) = %v", pin, ValidPIN(pin))
		}
		if _, err := Hash(pin); (err == nil) != ok {
			t.Errorf("Hash(%q): %v", pin, err)
		}
	}
}

// TestCheckBounds: a hash asking for more memory, passes or lanes than a till should spend,
// or malformed, is refused before any work.
func TestCheckBounds(t *testing.T) {
	good, _ := Hash("123456")
	if err := Check(good); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, "$")
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
		if Check(h) == nil {
			t.Errorf("Check took %q", h)
		}
		if _, err := Verify(h, "123456"); err == nil {
			t.Errorf("Verify took %q", h)
		}
	}
}
