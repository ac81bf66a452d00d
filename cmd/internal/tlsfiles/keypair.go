package tlsfiles

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// KeyPair is a certificate chain and its private key, read from two PEM
// files and read again when either file changes. Its methods may be
// called concurrently (every handshake calls one); it starts no
// goroutine.
type KeyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate // the last pair that loaded
	loaded  [2]stamp         // the files' stamps when cert was loaded
	refused [2]stamp         // the stamps of the last pair that failed to load
}

// stamp tells whether a file changed: a file renamed over it (another
// inode) or one rewritten in place (another size or modification time).
type stamp struct {
	info os.FileInfo
	err  error // the file could not be read
}

func (a stamp) same(b stamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil && a.err != nil && b.err != nil && a.err.Error() == b.err.Error()
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

func stampOf(file string) stamp {
	fi, err := os.Stat(file)
	if err != nil {
		return stamp{err: err}
	}
	return stamp{info: fi}
}

// LoadKeyPair reads a certificate file (PEM: the leaf first, then any
// intermediates, all of which are sent to the peer) and its key file
// (PEM). It fails when they cannot be read or do not match. log receives
// each later reload and each reload that fails (nil: nowhere).
func LoadKeyPair(certFile, keyFile string, log *slog.Logger) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile, log: orDiscard(log)}
	st := k.stamps()
	cert, err := k.load()
	if err != nil {
		return nil, err
	}
	k.cert, k.loaded = cert, st
	return k, nil
}

func (k *KeyPair) stamps() [2]stamp {
	return [2]stamp{stampOf(k.certFile), stampOf(k.keyFile)}
}

func (k *KeyPair) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s, key %s: %w", k.certFile, k.keyFile, err)
	}
	return &cert, nil
}

// Certificate returns the current pair: the files are checked on every
// call and read again when either changed since the last read. When they
// changed but do not load (a rotation half-written, a broken file), the
// last pair that loaded is returned and the failure is logged once; the
// next change of either file is tried again.
func (k *KeyPair) Certificate() *tls.Certificate {
	st := k.stamps()
	k.mu.Lock()
	defer k.mu.Unlock()
	if sameStamps(st, k.loaded) || sameStamps(st, k.refused) {
		return k.cert
	}
	cert, err := k.load()
	if err != nil {
		k.refused = st
		k.log.Warn("TLS certificate not reloaded: still serving the previous one", "err", err,
			"serving_until", k.cert.Leaf.NotAfter.Format(time.RFC3339))
		return k.cert
	}
	k.cert, k.loaded, k.refused = cert, st, [2]stamp{}
	k.log.Info("TLS certificate reloaded", "cert", k.certFile, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.Format(time.RFC3339))
	return k.cert
}

func sameStamps(a, b [2]stamp) bool { return a[0].same(b[0]) && a[1].same(b[1]) }

// GetCertificate is Certificate as tls.Config.GetCertificate (a server's
// certificate).
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate is Certificate as tls.Config.GetClientCertificate
// (a client's certificate, for servers that ask for one). The pair is
// sent even when the server names CAs that did not issue it, so that the
// server's refusal says why; the mismatch is logged.
func (k *KeyPair) GetClientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c := k.Certificate()
	if err := cri.SupportsCertificate(c); err != nil {
		k.log.Warn("TLS client certificate not among those the server accepts: it will likely refuse the connection",
			"err", err, "server_accepts_issuers", caNames(cri.AcceptableCAs), "cert_issuer", c.Leaf.Issuer.String())
	}
	return c, nil
}

// noClientCertificate is tls.Config.GetClientCertificate for a client
// with no certificate: it sends none, and logs that the server asked.
func noClientCertificate(log *slog.Logger) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		log.Warn("TLS server asks for a client certificate and none is configured: it will likely refuse the connection (mutual TLS)",
			"server_accepts_issuers", caNames(cri.AcceptableCAs))
		return &tls.Certificate{}, nil
	}
}

// caNames are the distinguished names of a CertificateRequest's
// acceptable CAs, readable.
func caNames(ders [][]byte) []string {
	var out []string
	for _, der := range ders {
		var rdn pkix.RDNSequence
		if rest, err := asn1.Unmarshal(der, &rdn); err != nil || len(rest) != 0 {
			out = append(out, "(unparsable name)")
			continue
		}
		var n pkix.Name
		n.FillFromRDNSequence(&rdn)
		out = append(out, n.String())
	}
	return out
}
