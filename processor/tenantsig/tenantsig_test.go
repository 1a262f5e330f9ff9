package tenantsig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
)

const (
	oldKey = "{id: old, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}"
	newKey = "{id: new, secret: b3RoZXItdGVuYW50LWtleS0wMTIzNDU2Nzg5YWJjZGVm}"
)

// Rotation without downtime: the first key signs, every listed key
// verifies, and the file is read again when it changes. Adding the new
// key second keeps the old signatures and signer; moving it first signs
// with it while the old signatures still verify; removing the old key
// refuses what it signed. A file broken by an edit keeps the last good keys.
func TestKeyringRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	write := func(keys ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("keys: ["+strings.Join(keys, ", ")+"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(oldKey)
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	k, err := Load("kafka.tenant_keys_file", path)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("a record")
	sign := func() string {
		t.Helper()
		v, err := k.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	byOld := sign()
	if !strings.HasPrefix(byOld, "v1;kid=old;") || k.Verify(byOld, msg) != nil {
		t.Fatalf("signed by the only key: %q %v", byOld, k.Verify(byOld, msg))
	}
	if err := k.Verify(byOld, []byte("another record")); !errors.Is(err, ErrInvalid) {
		t.Errorf("another message verified: %v", err)
	}
	write(oldKey, newKey)               // 1. the new key second: verifies, does not sign yet
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if v := sign(); !strings.HasPrefix(v, "v1;kid=old;") || k.Verify(byOld, msg) != nil {
		t.Errorf("new key added second: signs %q", v)
	}
	write(newKey, oldKey)               // 2. first: signs; old signatures still verify
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	byNew := sign()
	if !strings.HasPrefix(byNew, "v1;kid=new;") || k.Verify(byNew, msg) != nil || k.Verify(byOld, msg) != nil {
		t.Errorf("new key first: signs %q; new verifies %v, old %v", byNew, k.Verify(byNew, msg), k.Verify(byOld, msg))
	}
	write(newKey)                       // 3. the old key removed: what it signed is refused
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if err := k.Verify(byOld, msg); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"old"`) {
		t.Errorf("removed key's signature: %v, want ErrInvalid naming the key", err)
	}
	if err := k.Verify(byNew, msg); err != nil {
		t.Errorf("the new key: %v", err)
	}
	if err := os.WriteFile(path, []byte("keys: [{id: new, secret: c2hvcnQ=}, {id: xx, secret: not-base64}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	// A file broken by an edit (or removed) keeps the last good keys: the
	// new key still signs and verifies, the removed one stays refused, and
	// Check reports the file without showing a secret.
	if err := k.Check(); err == nil || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("a broken file passes Check (or its error shows a secret): %v", err)
	}
	if v := sign(); !strings.HasPrefix(v, "v1;kid=new;") || k.Verify(byNew, msg) != nil {
		t.Errorf("a broken file: signs %q, the new key verifies %v; want the last good keys", v, k.Verify(byNew, msg))
	}
	if err := k.Verify(byOld, msg); !errors.Is(err, ErrInvalid) {
		t.Errorf("a broken file: the removed key's signature: %v, want ErrInvalid", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if err := k.Verify(byNew, msg); err != nil || k.Check() == nil {
		t.Errorf("a removed file: verifies %v, Check %v; want the last good keys and an error", err, k.Check())
	}
	if _, err := Load("kafka.tenant_keys_file", path); err == nil {
		t.Error("start-up without a good keyring file was not refused")
	}
}

// A keyring file that is not one is refused naming the field and the key,
// never a secret.
func TestKeyringRefuses(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"", "holds no key"},
		{"keys: []", "holds no key"},
		{"keys: [{id: a, secret: c2hvcnQ=}]", "keys[0] (id \"a\"): secret: 5 bytes"},
		{"keys: [{id: a, secret: '!!!'}]", "not standard base64"},
		{"keys: [{id: a}]", "secret: missing"},
		{"keys: [{id: A, secret: c2hvcnQ=}]", "keys[0].id"},
		{"keys: [" + oldKey + ", " + oldKey + "]", "listed before"},
		{"keys: [{id: a, secret: c2hvcnQ=, extra: 1}]", "not a keyring"},
	} {
		_, err := Parse("kafka.tenant_keys_file", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "kafka.tenant_keys_file") {
			t.Errorf("%q: %v, want an error naming kafka.tenant_keys_file and %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "dGVzdC1") {
			t.Errorf("%q: the error shows a secret: %v", c.file, err)
		}
	}
}
