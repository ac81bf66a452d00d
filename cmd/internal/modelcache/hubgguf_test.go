package modelcache

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ggufHub is the Hub's repository layout in front of hub h: the listing
// /api/models/OWNER/REPO of files, and /OWNER/REPO/resolve/main/FILE
// served as h serves /resolve/main/FILE.
func ggufHub(t *testing.T, h *hub, repo string, files []string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/models/"+repo {
			var sib []map[string]string
			for _, f := range files {
				sib = append(sib, map[string]string{"rfilename": f})
			}
			json.NewEncoder(w).Encode(map[string]any{"id": repo, "siblings": sib})
			return
		}
		if rest, ok := strings.CutPrefix(r.URL.Path, "/"+repo); ok {
			r.URL.Path = rest
			h.serve(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPullGGUF(t *testing.T) {
	h := newHub(t)
	data := []byte("GGUF fake model bytes")
	h.put("Test-0.5B-Q8_0.gguf", data)
	files := []string{"README.md", "Test-0.5B-Q4_K_M.gguf", "Test-0.5B-Q8_0.gguf", "Test-0.5B-Q5_K_M-00001-of-00002.gguf", "Test-0.5B-Q5_K_M-00002-of-00002.gguf"}
	srv := ggufHub(t, h, "Org/Test-GGUF", files)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	ctx := context.Background()

	m, err := ResolveGGUF(ctx, client, srv.URL, "Org/Test-GGUF:q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "test-0.5b-q8_0" || m.Checkpoint.Name != "Test-0.5B-Q8_0.gguf" || len(m.Files()) != 1 {
		t.Fatalf("resolved %+v", m)
	}
	c := Cache{Dir: t.TempDir()}
	if out, err := pull(t, c, m, Options{}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, data)
	if p, ok, err := FindGGUF("test-0.5b-q8_0", []string{c.Dir}); !ok || err != nil || p != c.Path(m.Checkpoint) {
		t.Errorf("FindGGUF: %q %v %v", p, ok, err)
	}

	byFile, err := ResolveGGUF(ctx, client, srv.URL, "Org/Test-GGUF/Test-0.5B-Q8_0.gguf")
	if err != nil || byFile.Checkpoint != m.Checkpoint {
		t.Errorf("by file: %+v, %v; want %+v", byFile.Checkpoint, err, m.Checkpoint)
	}

	// The file's URL, as the Hub's page links it (resolve or blob).
	for _, u := range []string{"/Org/Test-GGUF/resolve/main/Test-0.5B-Q8_0.gguf?download=true", "/Org/Test-GGUF/blob/main/Test-0.5B-Q8_0.gguf"} {
		byURL, err := ResolveGGUF(ctx, client, "http://unused.invalid", srv.URL+u)
		if err != nil || byURL.Checkpoint != m.Checkpoint || byURL.ID != m.ID {
			t.Errorf("by URL %s: %+v, %v; want %+v", u, byURL, err, m)
		}
	}

	for spec, want := range map[string]string{
		srv.URL + "/Org/Test-GGUF":                                           "not a file in a repository",
		srv.URL + "/Org/Test-GGUF/resolve/main/README.md":                    "not a .gguf file",
		srv.URL + "/Org/Test-GGUF/tree/main/x.gguf":                          "not a file in a repository",
		srv.URL + "/Org/Test-GGUF/resolve/main/T-Q5_K_M-00001-of-00002.gguf": "split GGUF files are not supported",
		"Org/Test-GGUF:q6_k":                                                 "has no q6_k file; its GGUF files are: Test-0.5B-Q4_K_M.gguf, Test-0.5B-Q5_K_M-00001-of-00002.gguf",
		"Org/Test-GGUF:q5_k_m":                                               "split into parts",
		"Org/Test-GGUF":                                                      "name a .gguf file",
		"Org/Missing-GGUF:q8_0":                                              "404",
		"Org/Test-GGUF/x.gguf:q":                                             "not both",
	} {
		_, err := ResolveGGUF(ctx, client, srv.URL, spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", spec, err, want)
		}
	}
	// A file that is not there: the pull fails naming the hub's answer.
	missing, _ := ResolveGGUF(ctx, client, srv.URL, "Org/Test-GGUF/Nope.gguf")
	if _, err := pull(t, Cache{Dir: t.TempDir()}, missing, Options{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing file: %v", err)
	}
}
