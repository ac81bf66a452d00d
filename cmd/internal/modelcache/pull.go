package modelcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Options configures Pull. A nil *Options, and every zero field, means the
// default stated on the field.
type Options struct {
	// Client makes the requests. Default: a client that gives up on a
	// server that does not answer within 30s, with no limit on the length
	// of a download.
	Client *http.Client

	// Progress receives what Pull is doing, for a person to read.
	// Default: discard.
	Progress io.Writer

	// Terminal redraws one progress bar per file in place, for an
	// interactive terminal. Default false: a plain line every tenth of the
	// file, for logs and pipes.
	Terminal bool

	// Attempts is how many times one run tries a file whose connection
	// drops mid-download, each try resuming where the last stopped (a try
	// that receives nothing ends the run). Default 3.
	Attempts int
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		}}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
	return c
}

// DigestError is returned when a downloaded file's SHA-256 is not the one
// expected. The bad download has been removed.
type DigestError struct {
	File      string
	Got, Want string
	Source    string // where Want came from: "pinned" or "published by <host>"
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s: sha256 mismatch: got %s, want %s (%s); the download was corrupted or the file changed upstream, and was removed",
		e.File, e.Got, e.Want, e.Source)
}

// Pull downloads every file of m that is not complete in the cache, and
// checks the ones that are: each against its pinned SHA-256, or the one
// recorded when it was pulled, or else the one its server publishes. A
// partial download (NAME.part) is resumed. Cancelling ctx stops the
// download and keeps what arrived, for the next Pull to resume.
func (c Cache) Pull(ctx context.Context, m Model, opts *Options) error {
	o := opts.withDefaults()
	if opts == nil || opts.Client == nil {
		defer o.Client.CloseIdleConnections() // ours: leave no connection behind
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	for _, f := range m.Files() {
		if err := c.pullFile(ctx, f, &o); err != nil {
			var off *offlineError
			if errors.As(err, &off) {
				return fmt.Errorf("%w; without a network, %s", err, c.copyAdvice(m))
			}
			return err
		}
	}
	return nil
}

// copyAdvice says which of m's files are still missing from the cache,
// where to download them on another machine, and where to copy them.
func (c Cache) copyAdvice(m Model) string {
	var names, urls []string
	for _, f := range m.Files() {
		if _, err := os.Stat(c.Path(f)); err != nil {
			names, urls = append(names, f.Name), append(urls, f.URL)
		}
	}
	return fmt.Sprintf("copy %s (from %s) into %s by hand", strings.Join(names, " and "), strings.Join(urls, " and "), c.Dir)
}

func (c Cache) pullFile(ctx context.Context, f File, o *Options) error {
	final := c.Path(f)
	if _, err := os.Stat(final); err == nil {
		want, source, err := c.expected(ctx, f, o, true)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		got, err := hashFile(final)
		if err != nil {
			return err
		}
		if got == want {
			fmt.Fprintf(o.Progress, "%s: already in the cache, sha256 ok (%s)\n", f.Name, source)
			return nil
		}
		fmt.Fprintf(o.Progress, "%s: the cached copy's sha256 is %s, not %s (%s): downloading it again\n", f.Name, got, want, source)
		if err := removeIfExists(final, c.sumPath(f)); err != nil {
			return err
		}
	}
	want, source, err := c.expected(ctx, f, o, false)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: interrupted", f.Name)
		}
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	part := c.partPath(f)
	for attempt := 1; ; attempt++ {
		got, err := download(ctx, o, f, part)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			err = errors.New("interrupted")
		}
		if got == 0 || attempt == o.Attempts || ctx.Err() != nil {
			if st, serr := os.Stat(part); serr == nil && st.Size() > 0 {
				return fmt.Errorf("%s: %w; run the same command again to resume from %s (%s kept)", f.Name, err, part, formatBytes(st.Size()))
			}
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		fmt.Fprintf(o.Progress, "%s: connection lost (%v); resuming, try %d of %d\n", f.Name, err, attempt+1, o.Attempts)
	}
	got, err := hashFile(part)
	if err != nil {
		return err
	}
	if got != want {
		if err := removeIfExists(part); err != nil {
			return err
		}
		return &DigestError{File: f.Name, Got: got, Want: want, Source: source}
	}
	if err := os.Rename(part, final); err != nil {
		return err
	}
	if err := os.WriteFile(c.sumPath(f), []byte(want+"  "+f.Name+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "%s: sha256 ok (%s)\n", f.Name, source)
	return nil
}

// expected returns the SHA-256 f must have and where that came from: the
// pinned hash, else (for a file already in the cache, when cached is true)
// the one recorded when it was pulled, else the one its server publishes.
func (c Cache) expected(ctx context.Context, f File, o *Options, cached bool) (sum, source string, err error) {
	if f.SHA256 != "" {
		return f.SHA256, "pinned", nil
	}
	if cached {
		if b, err := os.ReadFile(c.sumPath(f)); err == nil {
			if s, _, _ := strings.Cut(string(b), " "); isSHA256(s) {
				return s, "recorded when pulled", nil
			}
		}
	}
	sum, err = published(ctx, o.Client, f)
	if err != nil {
		return "", "", err
	}
	return sum, "published by " + host(f.URL), nil
}

// published asks f's server for the SHA-256 of f: a HEAD request that
// follows redirects on the same host (a renamed repository) but not to
// another (the Hub answers an LFS file's resolve URL with a redirect to
// its CDN that carries X-Linked-Etag, the LFS object id, which is the
// SHA-256 of the content), reading X-Linked-Etag, else ETag.
func published(ctx context.Context, client *http.Client, f File) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, f.URL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept-Encoding", "identity")
	sameHost := *client
	sameHost.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[len(via)-1].URL.Host || len(via) >= 10 {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := sameHost.Do(req)
	if err != nil {
		return "", unreachable(f, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "", fmt.Errorf("%s answered %s for %s", host(f.URL), resp.Status, f.URL)
	}
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	sum := strings.ToLower(strings.Trim(strings.TrimPrefix(etag, "W/"), `"`))
	if !isSHA256(sum) {
		return "", fmt.Errorf("%s publishes no SHA-256 for %s (ETag %q), and none is pinned: refusing an unverified download",
			host(f.URL), f.URL, etag)
	}
	return sum, nil
}

// download fetches f into part, resuming from part's length with a Range
// request, and returns how many bytes this call wrote. It returns nil once
// part holds the whole file (by the server's count).
func download(ctx context.Context, o *Options, f File, part string) (written int64, err error) {
	var have int64
	if st, err := os.Stat(part); err == nil {
		have = st.Size()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, unreachable(f, err)
	}
	defer resp.Body.Close()

	flags, total := os.O_WRONLY|os.O_CREATE|os.O_TRUNC, resp.ContentLength
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return 0, fmt.Errorf("%s answered a resume at byte %d with Content-Range %q", host(f.URL), have, resp.Header.Get("Content-Range"))
		}
		flags, total = os.O_WRONLY|os.O_APPEND, size
		fmt.Fprintf(o.Progress, "%s: resuming at %s of %s\n", f.Name, formatBytes(have), formatSize(total))
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		return 0, nil // part already holds everything: the hash decides
	case resp.StatusCode == http.StatusOK:
		if have > 0 {
			fmt.Fprintf(o.Progress, "%s: the server does not resume downloads: starting again\n", f.Name)
		}
		have = 0
		fmt.Fprintf(o.Progress, "%s: downloading %s from %s\n", f.Name, formatSize(total), f.URL)
	default:
		return 0, fmt.Errorf("%s answered %s for %s", host(f.URL), resp.Status, f.URL)
	}
	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return 0, err
	}
	bar := newProgress(o.Progress, o.Terminal, f.Name, have, total)
	written, err = io.Copy(io.MultiWriter(out, bar), resp.Body)
	bar.finish()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && total >= 0 && have+written < total {
		err = io.ErrUnexpectedEOF
	}
	return written, err
}

// offlineError is a request that got no answer, most often because the
// machine is offline; Pull adds which files to copy by hand.
type offlineError struct {
	host string
	err  error
}

func (e *offlineError) Error() string {
	return fmt.Sprintf("cannot reach %s (offline?): %v", e.host, e.err)
}
func (e *offlineError) Unwrap() error { return e.err }

func unreachable(f File, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &offlineError{host: host(f.URL), err: err}
}

// parseContentRange parses "bytes START-END/SIZE" (SIZE may be "*": -1).
func parseContentRange(v string) (start, size int64, ok bool) {
	v, ok = strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, false
	}
	rng, sz, ok := strings.Cut(v, "/")
	first, _, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	size = -1
	if sz != "*" {
		if size, err = strconv.ParseInt(sz, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, size, true
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func host(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return raw
}

func removeIfExists(paths ...string) error {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
