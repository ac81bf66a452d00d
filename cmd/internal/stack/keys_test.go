package stack

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A gateway without a key store warns that it is open when it listens
// beyond loopback, and not on loopback or with --keys-file; --redis and
// --keys-file together are refused.
func TestOpenGatewayWarning(t *testing.T) {
	const warning = "the gateway is open"
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--http", "0.0.0.0:0"}, true},
		{[]string{"--http", "127.0.0.1:0"}, false},
		{[]string{"--http", "0.0.0.0:0", "--keys-file", filepath.Join(t.TempDir(), "keys.json")}, false},
		{[]string{"--http", "0.0.0.0:0", "--redis", "redis://127.0.0.1:1/0", "--no-keys"}, true},
	} {
		f, err := Parse("serve", append([]string{"--grpc", "127.0.0.1:0"}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		logs := &lockedBuffer{}
		log := slog.New(slog.NewTextHandler(logs, nil))
		cfg, err := f.Config(log)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Engine = &engine.Options{Repository: builtin.FS, Backends: builtin.Backends()}
		cfg.Logger = log
		st, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		st.StopNow()
		if got := strings.Contains(logs.String(), warning); got != tc.warn {
			t.Errorf("%v: warned %v, want %v:\n%s", tc.args, got, tc.warn, logs)
		}
	}
	f, err := Parse("gateway", []string{"--redis", "redis://127.0.0.1:1/0", "--keys-file", "k.json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(nil); err == nil {
		t.Error("--redis with --keys-file accepted")
	}
	f, err = Parse("gateway", []string{"--no-keys", "--keys-file", "k.json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(nil); err == nil {
		t.Error("--no-keys with --keys-file accepted")
	}
}
