package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/tlsfiles/tlstest"
	"github.com/streamgate/streamgate/gateway/ws"
)

var (
	namedUpstreamRE = regexp.MustCompile(`(?s)\bupstream\s+([\w.-]+)\s*\{.*?\}`)
	listenPortRE    = regexp.MustCompile(`(?m)^(\s*listen\s+)(\d+)([^;]*;)`)
	sslFileRE       = regexp.MustCompile(`(?m)^(\s*)(ssl_certificate(?:_key)?)\s+[^;]+;`)
	modulesPathRE   = regexp.MustCompile(`--modules-path=(\S+)`)
)

// renderNginxTLSConf is deploy/nginx-tls.conf with only what differs in a
// test put in: each upstream block's server becomes upstreams[its name],
// each listen port listens on listens[port], the certificate and key
// become cert and key, temporary files go to dir, and load, if not empty,
// loads the stream module. Every other directive is tested as shipped.
func renderNginxTLSConf(conf string, upstreams, listens map[string]string, cert, key, dir, load string) (string, error) {
	var err error
	conf = namedUpstreamRE.ReplaceAllStringFunc(conf, func(block string) string {
		name := namedUpstreamRE.FindStringSubmatch(block)[1]
		addr, ok := upstreams[name]
		if !ok {
			err = fmt.Errorf("upstream %q: no address for it in the test", name)
			return block
		}
		delete(upstreams, name)
		return upstreamAddrRE.ReplaceAllString(block, "${1}"+addr)
	})
	for name := range upstreams {
		err = fmt.Errorf("no upstream block %q", name)
	}
	conf = listenPortRE.ReplaceAllStringFunc(conf, func(l string) string {
		m := listenPortRE.FindStringSubmatch(l)
		addr, ok := listens[m[2]]
		if !ok {
			err = fmt.Errorf("listen %s: no address for it in the test", m[2])
			return l
		}
		delete(listens, m[2])
		return m[1] + addr + m[3]
	})
	for port := range listens {
		err = fmt.Errorf("no listen %s", port)
	}
	if err != nil {
		return "", err
	}
	if n := len(sslFileRE.FindAllString(conf, -1)); n != 2 {
		return "", fmt.Errorf("%d ssl_certificate(_key) directives, want 2", n)
	}
	conf = sslFileRE.ReplaceAllStringFunc(conf, func(l string) string {
		m := sslFileRE.FindStringSubmatch(l)
		if m[2] == "ssl_certificate" {
			return m[1] + m[2] + " " + cert + ";"
		}
		return m[1] + m[2] + " " + key + ";"
	})
	if load != "" {
		conf = load + "\n" + conf
	}
	return nginxTempPaths(conf, dir)
}

// nginxStreamModule is the load_module line nginx needs for a stream
// block: none when the module is built in, the module's file when it is
// dynamic. A dynamic module not installed skips the test, or fails it
// with STREAMGATE_REQUIRE=1.
func nginxStreamModule(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -V: %v\n%s", err, out)
	}
	v := string(out)
	if !strings.Contains(v, "--with-stream=dynamic") {
		return ""
	}
	dir := "/usr/lib/nginx/modules"
	if m := modulesPathRE.FindStringSubmatch(v); m != nil {
		dir = m[1]
	}
	path := filepath.Join(dir, "ngx_stream_module.so")
	if _, err := os.Stat(path); err != nil {
		msg := "nginx's stream module is not installed at " + path + " (apt-get install -y libnginx-mod-stream)"
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatal(msg + "; STREAMGATE_REQUIRE=1 makes this a failure")
		}
		t.Skip(msg + "; set STREAMGATE_REQUIRE=1 to fail instead")
	}
	return "load_module " + path + ";"
}

// TestNginxTLS runs deploy/nginx-tls.conf in front of two gateways: TLS
// terminated at nginx (nginx's certificate, HTTP/2 to the client, a
// plaintext gateway behind) and passed through (the gateway's own
// certificate and HTTP/2, negotiated through nginx).
func TestNginxTLS(t *testing.T) {
	bin := requireTool(t, "nginx", "/usr/sbin/nginx")
	load := nginxStreamModule(t, bin)
	certs := newTestCerts(t)
	plain := startStack(t)
	direct := certs.tlsStack(t, nil, false)
	ncert, nkey := certs.ca.Issue(t, tlstest.Options{Name: "nginx"}).WriteFiles(t, certs.dir, "nginx")

	src := filepath.Join(moduleRoot(t), "deploy", "nginx-tls.conf")
	shipped, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	term, pass := freeAddr(t), freeAddr(t)
	conf, err := renderNginxTLSConf(string(shipped),
		map[string]string{"streamgate": plain.addr, "streamgate_tls": direct.addr},
		map[string]string{"443": term, "8443": pass}, ncert, nkey, dir, load)
	if err != nil {
		t.Fatalf("%s: %v (update renderNginxTLSConf with the file)", src, err)
	}
	c := certs.client(t, nil)
	runNginx(t, bin, src, conf, dir, c, "https://"+term+"/healthz")
	t.Cleanup(c.CloseIdleConnections) // before nginx stops: it waits for open connections

	for _, tc := range []struct {
		name, addr, cert string // cert: whose certificate the client sees
	}{
		{"termination", term, "nginx"},
		{"pass-through", pass, "first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Post("https://"+tc.addr+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(3, 7, 0, 50)))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || resp.TLS.PeerCertificates[0].Subject.CommonName != tc.cert {
				t.Fatalf("%d over %s from %q: %s", resp.StatusCode, resp.Proto, resp.TLS.PeerCertificates[0].Subject.CommonName, body)
			}
			if got := resp.Header.Get("X-Accel-Buffering"); got != "no" {
				t.Errorf("X-Accel-Buffering %q", got)
			}
			want := []string{
				`{"model_name":"repeat_int32","model_version":"1","OUT":7,"IDX":0}`,
				`{"model_name":"repeat_int32","model_version":"1","OUT":8,"IDX":1}`,
				`{"model_name":"repeat_int32","model_version":"1","OUT":9,"IDX":2}`,
			}
			if got := events(t, string(body)); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("events %q", got)
			}

			conn, wresp, err := websocket.Dial(t.Context(), "wss://"+tc.addr+"/v1/ws",
				&websocket.DialOptions{HTTPClient: c, Subprotocols: []string{ws.Subprotocol}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			if wresp.StatusCode != http.StatusSwitchingProtocols || conn.Subprotocol() != ws.Subprotocol {
				t.Fatalf("upgrade %d %q", wresp.StatusCode, conn.Subprotocol())
			}
			wsSend(t, conn, `{"type":"generate","id":"n","model":"identity_int32","body":{"INPUT0":[1]}}`)
			frames := wsReadToEnd(t, conn)
			if len(frames) != 2 || frames[0] != `{"type":"data","id":"n","seq":0,"data":{"model_name":"identity_int32","model_version":"1","OUTPUT0":1}}` ||
				frames[1] != `{"type":"done","id":"n","reason":"final"}` {
				t.Errorf("frames %q", frames)
			}
			conn.Close(websocket.StatusNormalClosure, "")
		})
	}
}
