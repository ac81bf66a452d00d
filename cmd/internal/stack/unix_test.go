package stack

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/upstream"
)

// sockDir is a directory for unix sockets, removed when the test ends:
// short, for a socket's path must stay under 108 bytes.
func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// flagsConfig is the Config of command with args.
func flagsConfig(t *testing.T, command string, args ...string) Config {
	t.Helper()
	f, err := Parse(command, args)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startFlags starts the stack command's flags args describe, stopped
// when the test ends.
func startFlags(t *testing.T, command string, args ...string) *Stack {
	t.Helper()
	s, err := Start(flagsConfig(t, command, args...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}

// An engine listens on a unix socket (--grpc unix:PATH), over a socket a
// killed engine left behind, and a gateway in front of it (--upstream
// unix:PATH) relays a stream of responses on either upstream transport.
func TestUnixSocketStacks(t *testing.T) {
	path := filepath.Join(sockDir(t), "engine.sock")
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false) // as a killed process leaves it
	stale.Close()

	eng := startFlags(t, "engine", "--grpc", "unix:"+path)
	if eng.EngineAddr != "unix:"+path {
		t.Fatalf("engine at %q, want unix:%s", eng.EngineAddr, path)
	}
	for _, tr := range []string{upstream.TransportH2, upstream.TransportGRPC} {
		for _, form := range []string{"unix:", "unix://"} {
			t.Run(tr+"/"+form, func(t *testing.T) {
				gw := startFlags(t, "gateway", "--upstream", form+path, "--upstream-transport", tr, "--http", "127.0.0.1:0")
				resp, err := http.Post(gw.URL()+"/v2/models/repeat_int32/generate_stream", "application/json",
					strings.NewReader(`{"IN":[4,5,6],"DELAY":[0,0,0],"WAIT":0}`))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var events []string
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if ev, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						events = append(events, ev)
					}
				}
				if err := sc.Err(); err != nil {
					t.Fatal(err)
				}
				want := []string{
					`{"model_name":"repeat_int32","model_version":"1","OUT":4,"IDX":0}`,
					`{"model_name":"repeat_int32","model_version":"1","OUT":5,"IDX":1}`,
					`{"model_name":"repeat_int32","model_version":"1","OUT":6,"IDX":2}`,
				}
				if resp.StatusCode != 200 || strings.Join(events, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%d, events:\n%s\nwant:\n%s", resp.StatusCode, strings.Join(events, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}

// A malformed unix socket is refused, by --grpc and by --upstream, with
// what is wrong with it.
func TestUnixSocketFlags(t *testing.T) {
	f, err := Parse("engine", []string{"--grpc", "unix://engine/run/e.sock"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Config(nil)
	if want := `--grpc: "unix://engine/run/e.sock": a unix socket has no host ("engine"); want unix:PATH or unix:///ABSOLUTE_PATH`; err == nil || err.Error() != want {
		t.Fatalf("%v, want %s", err, want)
	}
	s, err := Start(flagsConfig(t, "gateway", "--upstream", "unix:", "--http", "127.0.0.1:0"))
	if want := `upstream: target "unix:": no socket path; want unix:PATH`; err == nil || err.Error() != want {
		if s != nil {
			s.StopNow()
		}
		t.Fatalf("%v, want %s", err, want)
	}
}
