package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// MinVersion is the oldest TLS version every configuration accepts.
const MinVersion = tls.VersionTLS12

// ServerFiles are a TLS server's files, as its flags name them.
type ServerFiles struct {
	// Cert is the certificate chain (PEM, leaf first); Key its private
	// key. Both empty: no TLS.
	Cert, Key string
	// ClientCA, if set, is a PEM bundle of the CAs client certificates
	// must chain to: every client must present one (mutual TLS).
	ClientCA string
}

// Enabled reports whether any file is named.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Config returns the server configuration f describes, or nil when f
// names no file: TLS 1.2 or later, the key pair reloaded on change (see
// KeyPair), client certificates required and verified when ClientCA is
// set. NextProtos is left to the server (net/http and gRPC add theirs).
// log receives reloads (nil: nowhere).
func (f ServerFiles) Config(log *slog.Logger) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("a certificate needs its key and a key its certificate")
	}
	kp, err := LoadKeyPair(f.Cert, f.Key, log)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: MinVersion, GetCertificate: kp.GetCertificate}
	if f.ClientCA != "" {
		pool, err := LoadCAs(f.ClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientFiles are a TLS client's files, as its flags name them.
type ClientFiles struct {
	// CA is a PEM bundle of the CAs the server's certificate must chain
	// to. Empty: the system's roots.
	CA string
	// Cert and Key are the client's own certificate chain and key, for a
	// server that requires one (mutual TLS). Both empty: none.
	Cert, Key string
	// ServerName is the name the server's certificate must carry. Empty:
	// the host of the address dialled.
	ServerName string
}

// Config returns the client configuration f describes: TLS 1.2 or later,
// the client key pair reloaded on change (see KeyPair). log receives
// reloads and, per handshake, a server's request for a client certificate
// that the configuration cannot satisfy: none configured, or one of a CA
// the server does not name (nil: nowhere).
func (f ClientFiles) Config(log *slog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: MinVersion, ServerName: f.ServerName}
	if f.CA != "" {
		pool, err := LoadCAs(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" || f.Key != "" {
		if f.Cert == "" || f.Key == "" {
			return nil, errors.New("a client certificate needs its key and a key its certificate")
		}
		kp, err := LoadKeyPair(f.Cert, f.Key, log)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = kp.GetClientCertificate
	} else {
		cfg.GetClientCertificate = noClientCertificate(orDiscard(log))
	}
	return cfg, nil
}

// LoadCAs reads a PEM bundle of CA certificates. A file with no
// certificate in it is an error.
func LoadCAs(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
