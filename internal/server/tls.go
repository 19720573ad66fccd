package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// serverTLS returns the server's TLS configuration and the fingerprint of
// the CA clients pin ("" when clients verify with the system's CAs), or
// nil when the server serves plain HTTP (loopback, or tls: off).
//
// Without tls_cert the server is its own certificate authority: the CA is
// made once in DATA_DIR/tls (kept, so pinned fingerprints stay valid) and
// the server's certificate is made again on every start for the names in
// listen and advertise_url (and this host's name), signed by it.
func serverTLS(cfg config.Server) (*tls.Config, string, error) {
	if !cfg.UseTLS() {
		return nil, "", nil
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, "", fmt.Errorf("tls_cert %s and tls_key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		fp := ""
		if n := len(cert.Certificate); n > 1 {
			fp = api.Fingerprint(cert.Certificate[n-1]) // the chain's CA
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, fp, nil
	}
	dir := filepath.Join(cfg.DataDir, "tls")
	ca, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return nil, "", err
	}
	leaf, err := makeServerCert(ca, caKey, certNames(cfg))
	if err != nil {
		return nil, "", err
	}
	return &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}, api.Fingerprint(ca.Raw), nil
}

// certNames are the hosts the server's certificate names.
func certNames(cfg config.Server) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		names = append(names, h)
	} else if err == nil {
		// Listening everywhere: every address of this host.
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				names = append(names, ipn.IP.String())
			}
		}
	}
	for _, u := range append([]string{cfg.AdvertiseURL}, cfg.AgentURLs...) {
		if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" {
			names = append(names, pu.Hostname())
		}
	}
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	return names
}

func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, err1 := os.ReadFile(certPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	if err1 == nil && err2 == nil {
		cb, _ := pem.Decode(certPEM)
		kb, _ := pem.Decode(keyPEM)
		if cb == nil || kb == nil {
			return nil, nil, fmt.Errorf("%s: not PEM; move the tls folder away to make a new CA (clients must then pin the new fingerprint)", dir)
		}
		cert, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", certPath, err)
		}
		key, err := x509.ParseECPrivateKey(kb.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
		}
		return cert, key, nil
	}
	if !errors.Is(err1, os.ErrNotExist) && err1 != nil {
		return nil, nil, err1
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "tide CA " + host, Organization: []string{"tide"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func makeServerCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "tide server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// caSetting is the store setting holding the fingerprint of the CA the
// replicas' certificates chain to.
const caSetting = "tls_ca_fingerprint"

// checkReplicaCA refuses a replica whose CA is not the one another live
// replica serves: agents and clients pin one fingerprint, so a replica
// with its own data dir (and so its own CA) would be unreachable to them
// after a failover. The fingerprint is recorded in the store; a server
// that starts alone (none leads) records its own, so a single server may
// change its CA.
func checkReplicaCA(ctx context.Context, st store.Store, cfg config.Server, fp string) error {
	if fp == "" {
		return nil
	}
	var prev string
	err := st.View(ctx, func(tx store.Tx) error {
		var err error
		prev, err = tx.GetSetting(ctx, caSetting)
		if store.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil || prev == fp {
		return err
	}
	if c, ok := st.(store.Cluster); ok && prev != "" {
		leader, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if leader != "" && leader != cfg.Replica {
			where := "tls_cert " + cfg.TLSCert
			if cfg.TLSCert == "" {
				where = "the CA in " + filepath.Join(cfg.DataDir, "tls")
			}
			return fmt.Errorf("TLS: %s (fingerprint %s) is not the CA replica %s serves (%s): agents and clients pin that one and could not reach this replica; copy replica %s's DATA_DIR/tls folder into %s (or give every replica the same tls_cert and tls_key) and start again",
				where, fp, leader, prev, leader, cfg.DataDir)
		}
	}
	return st.Update(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, caSetting, fp) })
}
