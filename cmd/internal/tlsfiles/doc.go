// Package tlsfiles builds the TLS configurations of streamgate's servers
// and clients from PEM files named by flags: the gateway's HTTPS listener,
// the engine's gRPC listener and the gateway's connections to its
// upstream targets.
//
// Start with ServerFiles.Config and ClientFiles.Config. Both check the
// files at once (a missing file, a key that does not match its
// certificate, a CA file without a certificate are errors then, not at the
// first handshake), and both serve their key pair through a KeyPair, which
// reads its files again when either changes: a certificate rotated on disk
// (renamed over the old one, as Kubernetes secret volumes and certbot do,
// or rewritten in place) is what the next handshake presents, with no
// restart and no effect on connections already open. A rotation caught
// half-written (a new certificate beside the old key) keeps the last good
// pair until the files match again.
//
// CA bundles (ServerFiles.ClientCA, ClientFiles.CA) are read once: changing
// the trusted CAs takes a restart.
//
// Package tlstest makes the throwaway CAs and certificates the tests use.
package tlsfiles
