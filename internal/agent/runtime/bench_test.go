package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkInputStart is the time from an input being ready on the node
// to the job's command having run (`ls` of the input), for a 1 GiB
// uri_folder of 1,000 files: bound read-only (ro_mount of a local
// datastore, or of a node cache entry: the same bind) against copied
// first (download, and ro_mount where the runtime cannot bind). The files
// are sparse, so the setup costs no disk; a copy still reads and writes
// every byte.
func BenchmarkInputStart(b *testing.B) {
	if !(Process{}).BindsReadOnly() {
		b.Skip("the process runtime binds read-only only as root")
	}
	src := b.TempDir()
	for i := range 1000 {
		f, err := os.Create(filepath.Join(src, fmt.Sprintf("part-%04d.bin", i)))
		if err == nil {
			err = f.Truncate(1 << 20)
			f.Close()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, spec Spec) {
		h, err := Process{}.Start(b.Context(), spec)
		if err != nil {
			b.Fatal(err)
		}
		if code, err := h.Wait(); code != 0 || err != nil {
			b.Fatalf("exit %d, %v", code, err)
		}
	}
	b.Run("ro_mount bind", func(b *testing.B) {
		dir := b.TempDir()
		target := filepath.Join(dir, "input")
		for b.Loop() {
			if err := os.MkdirAll(target, 0o755); err != nil {
				b.Fatal(err)
			}
			run(b, Spec{Command: "ls " + target + " > /dev/null", Dir: dir, ReadOnly: []Bind{{Source: src, Target: target}}})
		}
	})
	b.Run("copy", func(b *testing.B) {
		dir := b.TempDir()
		target := filepath.Join(dir, "input")
		for b.Loop() {
			if err := os.RemoveAll(target); err != nil {
				b.Fatal(err)
			}
			if err := os.CopyFS(target, os.DirFS(src)); err != nil {
				b.Fatal(err)
			}
			run(b, Spec{Command: "ls " + target + " > /dev/null", Dir: dir})
		}
	})
}
