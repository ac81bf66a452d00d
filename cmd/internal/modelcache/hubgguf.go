package modelcache

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
)

// IsGGUFSpec reports whether a pull argument names a GGUF file on the Hub
// (OWNER/REPO:QUANT, OWNER/REPO/FILE.gguf or the file's URL) rather than a
// catalog model.
func IsGGUFSpec(arg string) bool { return strings.Contains(arg, "/") }

// splitPart matches the parts of a split GGUF file (-00001-of-00003).
var splitPart = regexp.MustCompile(`-\d{5}-of-\d{5}\.gguf$`)

// ResolveGGUF turns OWNER/REPO:QUANT or OWNER/REPO/PATH/FILE.gguf into a
// Model with one file, fetched from hub's resolve URL (hub "" means
// DefaultHub) and checked against the SHA-256 the Hub publishes. For
// OWNER/REPO:QUANT it lists the repository's files (the Hub's
// /api/models/OWNER/REPO) and picks the one .gguf file whose name ends in
// QUANT (case-insensitive: q8_0 finds Qwen2.5-0.5B-Instruct-Q8_0.gguf);
// none or several is an error that lists what the repository has.
//
// A URL of a file on the Hub, as its page links it
// (https://huggingface.co/OWNER/REPO/resolve/REVISION/FILE.gguf, or
// /blob/ in place of /resolve/), is fetched from that host at that
// revision.
func ResolveGGUF(ctx context.Context, client *http.Client, hub, spec string) (Model, error) {
	if strings.HasPrefix(spec, "https://") || strings.HasPrefix(spec, "http://") {
		return ggufURL(spec)
	}
	if hub == "" {
		hub = DefaultHub
	}
	hub = strings.TrimSuffix(hub, "/")
	repo, quant, hasQuant := strings.Cut(spec, ":")
	parts := strings.Split(repo, "/")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return Model{}, fmt.Errorf("%q: want OWNER/REPO:QUANT (e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0) or OWNER/REPO/FILE.gguf", spec)
	}
	owner, name := parts[0], parts[1]
	file := strings.Join(parts[2:], "/")
	switch {
	case hasQuant && file != "":
		return Model{}, fmt.Errorf("%q: give either a quantization (OWNER/REPO:QUANT) or a file (OWNER/REPO/FILE.gguf), not both", spec)
	case !hasQuant && !strings.HasSuffix(strings.ToLower(file), ".gguf"):
		return Model{}, fmt.Errorf("%q: name a .gguf file (OWNER/REPO/FILE.gguf) or a quantization (OWNER/REPO:QUANT)", spec)
	case hasQuant:
		var err error
		if file, err = pickQuant(ctx, client, hub, owner, name, quant); err != nil {
			return Model{}, err
		}
	}
	base := path.Base(file)
	u := hub + "/" + url.PathEscape(owner) + "/" + url.PathEscape(name) + "/resolve/main/" + escapePath(file)
	return Model{
		Name:       spec,
		ID:         GGUFName(base),
		About:      "GGUF " + owner + "/" + name + "/" + file,
		Checkpoint: File{Name: base, URL: u},
	}, nil
}

// ggufURL resolves the URL of a GGUF file on the Hub.
func ggufURL(spec string) (Model, error) {
	u, err := url.Parse(spec)
	bad := func(why string) (Model, error) {
		return Model{}, fmt.Errorf("%q: %s; want a Hugging Face file URL such as https://huggingface.co/OWNER/REPO/resolve/main/FILE.gguf", spec, why)
	}
	if err != nil {
		return bad(err.Error())
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 5 || parts[2] != "resolve" && parts[2] != "blob" {
		return bad("not a file in a repository")
	}
	owner, name, rev, file := parts[0], parts[1], parts[3], strings.Join(parts[4:], "/")
	if !strings.HasSuffix(strings.ToLower(file), ".gguf") {
		return bad("not a .gguf file")
	}
	if splitPart.MatchString(strings.ToLower(path.Base(file))) {
		return Model{}, fmt.Errorf("%q: a part of a split GGUF file; split GGUF files are not supported", spec)
	}
	base := path.Base(file)
	dl := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/" + strings.Join([]string{owner, name, "resolve", rev, file}, "/")}
	return Model{
		Name:       spec,
		ID:         GGUFName(base),
		About:      "GGUF " + owner + "/" + name + "/" + file + " (" + rev + ")",
		Checkpoint: File{Name: base, URL: dl.String()},
	}, nil
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// pickQuant lists a repository's files and returns the .gguf file for
// quant.
func pickQuant(ctx context.Context, client *http.Client, hub, owner, name, quant string) (string, error) {
	u := hub + "/api/models/" + url.PathEscape(owner) + "/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("listing %s/%s on %s: %w", owner, name, host(u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("listing %s/%s: %s answered %s", owner, name, host(u), resp.Status)
	}
	var info struct {
		Siblings []struct {
			Name string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return "", fmt.Errorf("listing %s/%s: %w", owner, name, err)
	}
	want := strings.ToLower(quant) + ".gguf"
	var all, match, split []string
	for _, s := range info.Siblings {
		lower := strings.ToLower(s.Name)
		if !strings.HasSuffix(lower, ".gguf") {
			continue
		}
		all = append(all, s.Name)
		base := path.Base(lower)
		if splitPart.MatchString(base) {
			if strings.Contains(base, strings.ToLower(quant)) {
				split = append(split, s.Name)
			}
			continue
		}
		if strings.HasSuffix(base, "-"+want) || strings.HasSuffix(base, "."+want) || strings.HasSuffix(base, "_"+want) || base == want {
			match = append(match, s.Name)
		}
	}
	sort.Strings(all)
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1:
		sort.Strings(match)
		return "", fmt.Errorf("%s/%s has several %s files: %s; name one as %s/%s/FILE.gguf", owner, name, quant, strings.Join(match, ", "), owner, name)
	case len(split) > 0:
		return "", fmt.Errorf("%s/%s:%s is split into parts (%s); split GGUF files are not supported", owner, name, quant, strings.Join(split, ", "))
	case len(all) == 0:
		return "", fmt.Errorf("%s/%s has no .gguf files", owner, name)
	}
	return "", fmt.Errorf("%s/%s has no %s file; its GGUF files are: %s", owner, name, quant, strings.Join(all, ", "))
}
