package playground

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

//go:embed page
var files embed.FS

// scripts are joined, in this order, into the page's one module script.
var scripts = []string{"sse.js", "figures.js", "transports.js", "run.js", "app.js"}

// page is the assembled document and the headers that go with it.
type page struct {
	body []byte
	etag string
	csp  string
}

// Handler returns the handler of the playground page, which the gateway
// serves at GET /. It answers 304 to a matching If-None-Match. It panics
// if the embedded files are malformed, a build error.
func Handler() http.Handler {
	p, err := build()
	if err != nil {
		panic("playground: " + err.Error())
	}
	return p
}

func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", p.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(p.body))
}

// build inlines style.css and the scripts into index.html.
func build() (*page, error) {
	read := func(name string) (string, error) {
		b, err := files.ReadFile("page/" + name)
		return string(b), err
	}
	html, err := read("index.html")
	if err != nil {
		return nil, err
	}
	style, err := read("style.css")
	if err != nil {
		return nil, err
	}
	var script strings.Builder
	for _, name := range scripts {
		s, err := read(name)
		if err != nil {
			return nil, err
		}
		script.WriteString("\n// ---- " + name + "\n")
		script.WriteString(s)
	}
	for _, slot := range []string{"{{style}}", "{{script}}"} {
		if strings.Count(html, slot) != 1 {
			return nil, fmt.Errorf("index.html must hold %s exactly once", slot)
		}
	}
	if strings.Contains(strings.ToLower(script.String()), "</script") {
		return nil, errors.New("a script contains </script")
	}
	if strings.Contains(strings.ToLower(style), "</style") {
		return nil, errors.New("style.css contains </style")
	}
	html = strings.Replace(html, "{{style}}", style, 1)
	html = strings.Replace(html, "{{script}}", script.String(), 1)
	sum := sha256.Sum256([]byte(html))
	return &page{
		body: []byte(html),
		etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`,
		csp: strings.Join([]string{
			"default-src 'none'",
			"script-src " + hash(script.String()),
			"style-src " + hash(style),
			"img-src data:",
			"connect-src 'self'",
			"base-uri 'none'",
			"form-action 'none'",
			"frame-ancestors 'none'",
		}, "; "),
	}, nil
}

// hash is the CSP source expression allowing exactly the inline block s.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}
