package api

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Fingerprint is how a CA certificate is pinned: the SHA-256 of its DER
// bytes, in hex.
func Fingerprint(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// PinnedTLS returns a TLS configuration that trusts exactly one CA: the
// certificate, sent by the server with its chain, whose fingerprint is
// pinned. The server's certificate must be signed by it and name the host
// dialed. A server whose chain holds no such CA is refused, naming the
// fingerprint seen.
func PinnedTLS(fingerprint string) *tls.Config {
	want := strings.ToLower(strings.ReplaceAll(fingerprint, ":", ""))
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	// The chain is checked below, against the pinned CA instead of the
	// system's roots.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		roots := x509.NewCertPool()
		var seen []string
		for _, c := range cs.PeerCertificates[1:] {
			fp := Fingerprint(c.Raw)
			seen = append(seen, fp)
			if fp == want {
				roots.AddCert(c)
			}
		}
		if len(roots.Subjects()) == 0 { //nolint:staticcheck // a pool built here, not the system's
			return fmt.Errorf("tls: the server's certificate does not chain to the pinned CA %s (it sent CAs %v): another server, or a changed CA; check ca_fingerprint", want, seen)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()})
		if err != nil {
			return fmt.Errorf("tls: the server's certificate: %w", err)
		}
		return nil
	}
	return cfg
}
