// Package tlstest makes throwaway certificate authorities and certificates
// for tests, with crypto/x509: a root CA, intermediates, and server and
// client certificates (valid, expired, from another CA), written as PEM
// files where the code under test reads them.
//
// Start with NewCA, then CA.Issue.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority: a root, or an intermediate of another CA.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// chain is the intermediates from this CA up to the root, this CA
	// first; empty for a root.
	chain []*x509.Certificate
}

// NewCA returns a root CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := caTemplate(t, name)
	return &CA{Cert: sign(t, tmpl, tmpl, &key.PublicKey, key), key: key}
}

func caTemplate(t testing.TB, name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"streamgate tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
}

// Intermediate returns a CA named name signed by ca. Certificates it
// issues carry it in their chain.
func (ca *CA) Intermediate(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := caTemplate(t, name)
	tmpl.MaxPathLenZero = true
	cert := sign(t, tmpl, ca.Cert, &key.PublicKey, ca.key)
	return &CA{Cert: cert, key: key, chain: append([]*x509.Certificate{cert}, ca.chain...)}
}

// Pool is a pool holding only ca's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// PEM is ca's certificate in PEM.
func (ca *CA) PEM() []byte { return certPEM(ca.Cert) }

// WriteFile writes ca's certificate as dir/name and returns the path.
func (ca *CA) WriteFile(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Use says what a certificate is for.
type Use int

const (
	// Server certificates name localhost, 127.0.0.1 and ::1 (and Hosts).
	Server Use = iota
	// Client certificates are for mutual TLS.
	Client
)

// Options shape a certificate. The zero value is a server certificate
// valid from an hour ago for a day.
type Options struct {
	Use Use
	// Name is the subject's common name. Default "localhost" for a server,
	// "client" for a client.
	Name string
	// Hosts are more DNS names or IP addresses a server certificate names.
	Hosts []string
	// Expired makes the certificate's validity end an hour ago.
	Expired bool
}

// Cert is an issued certificate and its key.
type Cert struct {
	Leaf  *x509.Certificate
	Key   *ecdsa.PrivateKey
	chain []*x509.Certificate // intermediates, nearest first
}

// Issue returns a certificate signed by ca.
func (ca *CA) Issue(t testing.TB, o Options) *Cert {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if o.Expired {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}
	switch o.Use {
	case Client:
		tmpl.Subject.CommonName = or(o.Name, "client")
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		tmpl.Subject.CommonName = or(o.Name, "localhost")
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, o.Hosts...) {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	return &Cert{Leaf: sign(t, tmpl, ca.Cert, &key.PublicKey, ca.key), Key: key, chain: ca.chain}
}

// ChainPEM is the certificate followed by its intermediates, in PEM: what
// a --tls-cert file holds.
func (c *Cert) ChainPEM() []byte {
	out := certPEM(c.Leaf)
	for _, ic := range c.chain {
		out = append(out, certPEM(ic)...)
	}
	return out
}

// KeyPEM is the private key in PEM (PKCS #8).
func (c *Cert) KeyPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TLS is the certificate as a tls.Certificate, for a Go client or server.
func (c *Cert) TLS() tls.Certificate {
	tc := tls.Certificate{Certificate: [][]byte{c.Leaf.Raw}, PrivateKey: c.Key, Leaf: c.Leaf}
	for _, ic := range c.chain {
		tc.Certificate = append(tc.Certificate, ic.Raw)
	}
	return tc
}

// WriteFiles writes the chain as dir/name.crt and the key as dir/name.key,
// each by renaming a new file over the old one (as a Kubernetes secret
// volume or certbot rotates), and returns their paths.
func (c *Cert) WriteFiles(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	replace(t, certFile, c.ChainPEM())
	replace(t, keyFile, c.KeyPEM(t))
	return certFile, keyFile
}

// SPKIHash is the base64 SHA-256 of the certificate's public key
// (SubjectPublicKeyInfo): what Chromium's
// --ignore-certificate-errors-spki-list takes.
func (c *Cert) SPKIHash() string {
	sum := sha256.Sum256(c.Leaf.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

func replace(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
