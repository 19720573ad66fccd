// Package dockertest gives tests a real Docker engine and small test
// images made without a registry (none is reachable in CI): a busybox image
// imported from the host's busybox-static binary, and a node image that
// adds the host's C library so a mounted tide binary runs.
//
// A test that needs the engine skips when none answers, unless the CI
// environment variable is set: then it fails, so CI cannot pass without
// testing against a real engine.
package dockertest

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/internal/dockerengine"
)

// busyboxPaths are where Debian's busybox-static (or busybox) installs it.
var busyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox"}

// applets are linked in the image's /bin.
var applets = []string{"sh", "echo", "cat", "ls", "sleep", "env", "pwd", "head", "tail", "dd",
	"mkdir", "rm", "true", "false", "id", "seq", "wc", "yes", "touch", "test", "[", "printf", "kill", "df", "cut", "grep", "tr"}

// Engine returns a client of the local engine, or skips (fails under CI)
// when no engine answers.
func Engine(t testing.TB) *dockerengine.Client {
	t.Helper()
	c := dockerengine.New("")
	if err := c.Ping(context.Background()); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dockertest: no Docker engine answers (%v); CI must start dockerd (.ci/run)", err)
		}
		t.Skipf("dockertest: no Docker engine answers (%v); start dockerd to run this test", err)
	}
	return c
}

var importMu sync.Mutex

// Busybox makes sure the busybox image exists (importing it from the
// host's busybox binary) and returns its name.
func Busybox(t testing.TB, c *dockerengine.Client) string {
	t.Helper()
	return ensureImage(t, c, "tide-test/busybox")
}

// NodeImage makes sure an image exists with busybox plus the shared
// libraries that binary needs (as ldd lists them), so a dynamically linked
// tide binary mounted into it runs; it returns the image's name.
func NodeImage(t testing.TB, c *dockerengine.Client, binary string) string {
	t.Helper()
	out, err := exec.Command("ldd", binary).Output()
	var libs []string
	if err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(l) {
				if strings.HasPrefix(f, "/") {
					libs = append(libs, f)
				}
			}
		}
	}
	sort.Strings(libs)
	return ensureImage(t, c, "tide-test/node", libs...)
}

// ensureImage imports repo:TAG, a busybox root filesystem with the given
// host files, unless it exists. TAG hashes the applets and files, so a
// change (or a host with other libraries) gets its own image.
func ensureImage(t testing.TB, c *dockerengine.Client, repo string, files ...string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(strings.Join(append(append([]string{}, applets...), files...), "\n")))
	ref := repo + ":" + hex.EncodeToString(sum[:])[:12]
	importMu.Lock()
	defer importMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ok, err := c.ImageExists(ctx, ref); err != nil {
		t.Fatalf("dockertest: %v", err)
	} else if ok {
		return ref
	}
	bin := busyboxBinary(t)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRootfs(pw, bin, files...)) }()
	if err := c.ImportImage(ctx, ref, pr); err != nil {
		t.Fatalf("dockertest: importing %s: %v", ref, err)
	}
	return ref
}

// busyboxBinary finds the host's busybox, or skips (fails under CI).
func busyboxBinary(t testing.TB) string {
	t.Helper()
	for _, p := range busyboxPaths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("dockertest: no busybox binary; CI must install busybox-static")
	}
	t.Skip("dockertest: no busybox binary; install busybox-static")
	return ""
}

// writeRootfs writes a root filesystem with busybox, its applets and the
// given host files (at the same paths, symlinks resolved).
func writeRootfs(w io.Writer, busybox string, files ...string) error {
	b, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, d := range []string{"bin/", "tmp/", "etc/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}); err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	dirs := map[string]bool{"bin": true, "tmp": true, "etc": true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(f, "/")
		// Parent folders first; tar readers create them otherwise, but
		// with surprising modes.
		parts := strings.Split(name, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
					return err
				}
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}
