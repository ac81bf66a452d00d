package playground

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// inline returns the contents of the one <tag ...>...</tag> block of page.
func inline(t *testing.T, page, open, close string) string {
	t.Helper()
	i := strings.Index(page, open)
	j := strings.Index(page, close)
	if i < 0 || j < i || strings.Count(page, open) != 1 {
		t.Fatalf("the page has no single %s…%s block", open, close)
	}
	return page[i+len(open) : j]
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// The page is one document: its style and script are inline, allowed by
// exactly their hashes, and it loads nothing from anywhere else.
func TestPageIsSelfContained(t *testing.T) {
	w := get(t, Handler())
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	page := w.Body.String()
	script := inline(t, page, `<script type="module">`, `</script>`)
	style := inline(t, page, `<style>`, `</style>`)
	csp := map[string]string{}
	for _, d := range strings.Split(w.Header().Get("Content-Security-Policy"), ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		csp[name] = value
	}
	for name, want := range map[string]string{
		"default-src": "'none'", "script-src": sha(script), "style-src": sha(style),
		"connect-src": "'self'", "img-src": "data:", "base-uri": "'none'", "form-action": "'none'",
	} {
		if csp[name] != want {
			t.Errorf("Content-Security-Policy %s %q, want %q", name, csp[name], want)
		}
	}
	for _, name := range scripts {
		if !strings.Contains(script, "// ---- "+name+"\n") {
			t.Errorf("the script lacks %s", name)
		}
	}
	if strings.Contains(page, "{{") {
		t.Error("a {{slot}} was left in the page")
	}
	// Nothing is loaded from elsewhere: no src or href but the data: icon,
	// no CSS imports or url(), no absolute URL but XML namespaces.
	if m := regexp.MustCompile(`\ssrc=`).FindString(page); m != "" {
		t.Errorf("the page loads a resource: %q", m)
	}
	if m := regexp.MustCompile(`@import|url\(`).FindString(style); m != "" {
		t.Errorf("the style loads a resource: %q", m)
	}
	for _, m := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], "data:") {
			t.Errorf("href %q", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"'<>)]*`).FindAllString(page, -1) {
		if m != "http://www.w3.org/2000/svg" {
			t.Errorf("the page names %q", m)
		}
	}
}

// Every element the scripts look up by id is in the markup.
func TestScriptsFindTheirElements(t *testing.T) {
	page := get(t, Handler()).Body.String()
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\sid="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		if ids[m[1]] {
			t.Errorf("id %q is used twice", m[1])
		}
		ids[m[1]] = true
	}
	script := inline(t, page, `<script type="module">`, `</script>`)
	var used []string
	for _, m := range regexp.MustCompile(`(?:\$|getElementById)\("([^"]+)"\)`).FindAllStringSubmatch(script, -1) {
		used = append(used, m[1])
		if !ids[m[1]] {
			t.Errorf("a script looks up #%s, which the page does not have", m[1])
		}
	}
	if len(used) < 20 || !slices.Contains(used, "send") {
		t.Errorf("found only %d lookups: %v", len(used), used)
	}
}

// A page the browser has is revalidated with its ETag.
func TestPageRevalidates(t *testing.T) {
	h := Handler()
	w := get(t, h)
	etag := w.Header().Get("ETag")
	if etag == "" || w.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, w.Header().Get("Cache-Control"))
	}
	if w := get(t, h, "If-None-Match", etag); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("If-None-Match %s: %d with %d bytes", etag, w.Code, w.Body.Len())
	}
	if w := get(t, h, "If-None-Match", `"other"`); w.Code != http.StatusOK {
		t.Errorf("a stale ETag: %d", w.Code)
	}
}

// The joined script parses as a JavaScript module (node --check), so a
// syntax error fails here too, not only in the Chromium tests.
func TestScriptParses(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatal("node is not installed (STREAMGATE_REQUIRE=1)")
		}
		t.Skip("node is not installed")
	}
	page := get(t, Handler()).Body.String()
	file := filepath.Join(t.TempDir(), "playground.mjs")
	if err := os.WriteFile(file, []byte(inline(t, page, `<script type="module">`, `</script>`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), node, "--check", file).CombinedOutput(); err != nil {
		t.Fatalf("node --check: %v\n%s", err, out)
	}
}
