package upstream

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// address is where a target's connections go, read as grpc-go reads a
// target, so that both transports dial the same socket and send the same
// :authority:
//
//   - "host:port" (":port" is localhost) over TCP;
//   - "unix:PATH" (relative or absolute) or "unix:///ABSOLUTE_PATH", a
//     unix socket, whose authority is "localhost";
//   - "unix-abstract:NAME", a socket in Linux's abstract namespace;
//   - "passthrough:///host:port", grpc-go's name for "host:port".
type address struct {
	network, addr string // for net.Dial
	// authority is gRPC's :authority for the target, unless its TLS
	// configuration names the server (see targetAuthority).
	authority string
}

// parseAddress reads target (not a dns:/// name: New resolves those).
func parseAddress(target string) (address, error) {
	scheme, _, _ := strings.Cut(target, ":")
	if scheme != "unix" && scheme != "unix-abstract" && scheme != "passthrough" {
		return tcpAddress(target), nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return address{}, fmt.Errorf("upstream: target %q: %v", target, err)
	}
	endpoint := cmp.Or(u.Path, u.Opaque)
	if scheme == "passthrough" {
		if endpoint = strings.TrimPrefix(endpoint, "/"); endpoint == "" {
			return address{}, fmt.Errorf("upstream: target %q: no address; want passthrough:///host:port", target)
		}
		return tcpAddress(endpoint), nil
	}
	if u.Host != "" {
		return address{}, fmt.Errorf("upstream: target %q: a unix socket has no host (%q); want %s:PATH or %s:///ABSOLUTE_PATH", target, u.Host, scheme, scheme)
	}
	if endpoint == "" {
		return address{}, fmt.Errorf("upstream: target %q: no socket path; want %s:PATH", target, scheme)
	}
	if scheme == "unix-abstract" {
		endpoint = "@" + endpoint // Go's spelling of the abstract namespace
	}
	return address{network: "unix", addr: endpoint, authority: "localhost"}, nil
}

func tcpAddress(hostport string) address {
	a := address{network: "tcp", addr: hostport, authority: hostport}
	if strings.HasPrefix(hostport, ":") {
		a.authority = "localhost" + hostport
	}
	return a
}

// serverName is the name a TLS handshake with a target whose authority
// is authority checks, when its configuration names none: the
// authority's host (grpc-go's rule).
func serverName(authority string) string {
	if host, _, err := net.SplitHostPort(authority); err == nil {
		return host
	}
	return authority
}
