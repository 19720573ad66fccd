package blob

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tideml/tide/internal/filestore"
)

func tarGz(t *testing.T, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestPut(t *testing.T) {
	files, err := filestore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(files, t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	good := tarGz(t, "src/a.py", "print(1)")
	bomb := tarGz(t, "zeros", strings.Repeat("\x00", 5000))
	slip := tarGz(t, "../../evil", "x")
	big := bytes.Repeat([]byte{1}, 1001)
	tests := []struct {
		name    string
		digest  string
		body    []byte
		wantErr error
	}{
		{"good", digest(good), good, nil},
		{"good again", digest(good), good, nil},
		{"wrong digest", digest(slip), good, ErrDigest},
		{"too large upload", digest(big), big, ErrTooLarge},
		{"expands too far", digest(bomb), bomb, ErrTooLarge},
		{"tar slip", digest(slip), slip, ErrArchive},
		{"not gzip", digest([]byte("hello")), []byte("hello"), ErrArchive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Put(t.Context(), tt.digest, bytes.NewReader(tt.body))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if has := s.Has(t.Context(), tt.digest); has != (tt.wantErr == nil) {
				t.Fatalf("Has = %v", has)
			}
		})
	}
	if err := s.Put(t.Context(), "not-a-digest", bytes.NewReader(good)); err == nil {
		t.Fatal("bad name accepted")
	}
	f, n, err := s.Open(t.Context(), digest(good))
	if err != nil || n != int64(len(good)) {
		t.Fatalf("Open: %d, %v", n, err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(b, good) {
		t.Fatal("stored bytes differ")
	}
}
