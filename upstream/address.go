package upstream

import (
	"cmp"
	"errors"
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

// parseAddress reads target (not a dns:/// name: New resolves those). Its
// errors say what is wrong, not which target (the caller's to add).
func parseAddress(target string) (address, error) {
	scheme, _, _ := strings.Cut(target, ":")
	if scheme != "unix" && scheme != "unix-abstract" && scheme != "passthrough" {
		return tcpAddress(target), nil
	}
	u, err := url.Parse(target)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return address{}, ue.Err
	} else if err != nil {
		return address{}, err
	}
	endpoint := cmp.Or(u.Path, u.Opaque)
	if scheme == "passthrough" {
		if endpoint = strings.TrimPrefix(endpoint, "/"); endpoint == "" {
			return address{}, errors.New("no address; want passthrough:///host:port")
		}
		return tcpAddress(endpoint), nil
	}
	if u.Host != "" {
		return address{}, fmt.Errorf("a unix socket has no host (%q); want %s:PATH or %s:///ABSOLUTE_PATH", u.Host, scheme, scheme)
	}
	if endpoint == "" {
		return address{}, fmt.Errorf("no socket path; want %s:PATH", scheme)
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

// SocketPath is the unix socket target names, as New reads it:
// "unix:PATH" or "unix:///ABSOLUTE_PATH" a path, "unix-abstract:NAME"
// "@NAME" (Linux's abstract namespace); ok is false for a target that
// names no socket, and err says what is wrong with a malformed one.
func SocketPath(target string) (path string, ok bool, err error) {
	a, err := parseAddress(target)
	if err != nil {
		return "", true, fmt.Errorf("%q: %w", target, err)
	}
	return a.addr, a.network == "unix", nil
}
