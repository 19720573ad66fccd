package dockerengine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func frame(stream byte, s string) []byte {
	h := make([]byte, 8)
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(s)))
	return append(h, s...)
}

func TestDemux(t *testing.T) {
	tests := []struct {
		name           string
		in             []byte
		stdout, stderr string
		wantErr        bool
	}{
		{name: "empty"},
		{name: "both streams", in: bytes.Join([][]byte{frame(1, "out1\n"), frame(2, "err\n"), frame(1, "out2\n")}, nil), stdout: "out1\nout2\n", stderr: "err\n"},
		{name: "truncated payload", in: frame(1, "hello")[:10], stdout: "he", wantErr: true},
		{name: "truncated header", in: []byte{1, 0, 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := demux(bytes.NewReader(tt.in), &out, &errOut)
			if (err != nil) != tt.wantErr || out.String() != tt.stdout || errOut.String() != tt.stderr {
				t.Errorf("demux = %v, %q, %q; want error %v, %q, %q", err, out.String(), errOut.String(), tt.wantErr, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestTarDirIsStable: the build cache keys on the tar stream's hash, so the
// same content must give the same bytes whatever the files' times.
func TestTarDirIsStable(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"Dockerfile": "FROM x\n", "sub/a.txt": "a", "b.txt": "b"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	hash := func() [32]byte {
		var b bytes.Buffer
		if err := TarDir(dir, &b); err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b.Bytes())
	}
	first := hash()
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "b.txt"), later, later); err != nil {
		t.Fatal(err)
	}
	if hash() != first {
		t.Error("a changed modification time changed the tar stream")
	}
	if err := os.WriteFile(filepath.Join(dir, "b.txt"), []byte("B"), 0o644); err != nil {
		t.Fatal(err)
	}
	if hash() == first {
		t.Error("changed content gave the same tar stream")
	}
}
