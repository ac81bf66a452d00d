package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamgate/streamgate/gateway/store"
)

func TestKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		testKeys(t, s)
	})
	t.Run("file", func(t *testing.T) {
		f, err := store.OpenKeysFile(filepath.Join(t.TempDir(), "keys.json"))
		if err != nil {
			t.Fatal(err)
		}
		testKeys(t, f)
	})
}

func testKeys(t *testing.T, s store.Keys) {
	ctx := t.Context()
	k, secret, err := store.NewKey("alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, store.SecretPrefix) || strings.Contains(k.Hash, secret) {
		t.Fatalf("secret %q, hash %q", secret, k.Hash)
	}
	k.Limit = store.Limit{RPM: 10, TPM: 1000, Concurrency: 2}
	k.Models = []string{"a", "b"}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	k2, _, _ := store.NewKey("alice", time.Now())
	if err := s.CreateKey(ctx, k2); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second alice: %v, want ErrExists", err)
	}
	got, err := s.LookupKey(ctx, store.HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || got.Name != "alice" || got.Limit != k.Limit || !got.Allows("b") || got.Allows("c") {
		t.Fatalf("lookup: %+v, want %+v", got, k)
	}
	if _, err := s.LookupKey(ctx, store.HashSecret(secret+"x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("wrong secret: %v, want ErrNotFound", err)
	}
	bob, _, _ := store.NewKey("bob", time.Now())
	if err := s.CreateKey(ctx, bob); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "alice" || list[1].Name != "bob" {
		t.Fatalf("list: %+v", list)
	}
	if err := s.RevokeKey(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke twice: %v, want ErrNotFound", err)
	}
	if _, err := s.LookupKey(ctx, store.HashSecret(secret)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked: %v, want ErrNotFound", err)
	}
	// The name is free again, for a new secret.
	k3, secret3, _ := store.NewKey("alice", time.Now())
	if err := s.CreateKey(ctx, k3); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LookupKey(ctx, store.HashSecret(secret3)); err != nil || got.ID != k3.ID || got.ID == k.ID {
		t.Fatalf("new alice: %+v, %v", got, err)
	}
}

func TestKeyNamesAndExpiry(t *testing.T) {
	for _, bad := range []string{"", "-x", "a b", "ä", strings.Repeat("a", 65)} {
		if _, _, err := store.NewKey(bad, time.Now()); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	now := time.Now()
	k, _, _ := store.NewKey("x", now)
	if k.Expired(now.Add(time.Hour)) {
		t.Error("a key with no expiry expired")
	}
	k.Expires = now.Add(time.Minute)
	if k.Expired(now) || !k.Expired(now.Add(time.Minute)) {
		t.Error("expiry")
	}
}

// A gateway reading the keys file sees keys another process (the CLI)
// adds and revokes.
func TestKeysFileSeesChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	gw, err := store.OpenKeysFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := store.OpenKeysFile(path)
	k, secret, _ := store.NewKey("k", time.Now())
	if err := cli.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.LookupKey(t.Context(), store.HashSecret(secret)); err != nil {
		t.Fatalf("after create: %v", err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), secret) {
		t.Fatal("the keys file holds the secret")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	cli2, _ := store.OpenKeysFile(path)
	if err := cli2.RevokeKey(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.LookupKey(t.Context(), store.HashSecret(secret)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after revoke: %v", err)
	}
}

func TestOpenURLForms(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:1/0", "*redis.Client"},
		{"redis://127.0.0.1:1/0?master_name=m&addr=127.0.0.1:2", "*redis.Client"}, // failover client
		{"redis://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3", "*redis.ClusterClient"},
	} {
		s, err := store.Open(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := typeName(s.(*store.Redis).Client()); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.url, got, tc.want)
		}
		s.Close()
	}
	for _, bad := range []string{"http://x", "redis://u:secretpw@h:1/x", "redis://h:1/0?nope=1"} {
		_, err := store.Open(bad)
		if err == nil {
			t.Errorf("%s accepted", bad)
		} else if strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%s: the error shows the password: %v", bad, err)
		}
	}
}

// A Redis that is down fails requests at once: short timeouts and one
// retry unless the URL says otherwise.
func TestOpenDefaults(t *testing.T) {
	for url, want := range map[string][2]int{
		"redis://127.0.0.1:1/0":                                             {1, 1},
		"redis://127.0.0.1:1/0?max_retries=2":                               {2, 1},
		"redis://127.0.0.1:1/0?read_timeout=5s&dial_timeout=2s&pool_size=3": {1, 1},
	} {
		s, err := store.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		o := s.(*store.Redis).Client().(*redis.Client).Options()
		if o.MaxRetries != want[0] || o.DialerRetries != want[1] || o.WriteTimeout != time.Second {
			t.Errorf("%s: retries %d, dialer retries %d, write timeout %v", url, o.MaxRetries, o.DialerRetries, o.WriteTimeout)
		}
		if strings.Contains(url, "read_timeout=5s") && (o.ReadTimeout != 5*time.Second || o.DialTimeout != 2*time.Second) {
			t.Errorf("%s: read timeout %v, dial timeout %v", url, o.ReadTimeout, o.DialTimeout)
		}
		s.Close()
	}
}
