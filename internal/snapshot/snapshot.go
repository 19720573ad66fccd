// Package snapshot packs a job's code folder or a local data input into a
// content-addressed tar.gz, as Azure ML's CLI snapshots a job's `code`:
// files matched by .amlignore (or, in a folder without one, .gitignore)
// are left out, and the archive depends only on the files' names, modes
// and contents, so packing the same folder twice gives the same SHA-256
// and the server stores it once.
package snapshot

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// IgnoreFiles are the files whose patterns leave paths out of a snapshot;
// in each folder the first one present is used.
var IgnoreFiles = []string{".amlignore", ".gitignore"}

// Snapshot is a packed folder or file in a temporary file.
type Snapshot struct {
	// Path is the temporary tar.gz; Remove deletes it.
	Path string
	// Digest is the hex SHA-256 of the tar.gz.
	Digest string
	// Size is the tar.gz's size; Files and Bytes count what it holds.
	Size, Bytes int64
	Files       int
}

// Remove deletes the temporary file.
func (s *Snapshot) Remove() error { return os.Remove(s.Path) }

// Pack packs src, a folder or a single file, into a temporary tar.gz. A
// folder's files are stored relative to it; a single file is stored under
// its base name. Links are stored as links; one that points outside src
// is an error, since the node could not follow it.
func Pack(src string) (*Snapshot, error) {
	info, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "tide-snapshot-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", src, err)
	}
	snap := &Snapshot{Path: f.Name()}
	h := sha256.New()
	counter := &countWriter{w: io.MultiWriter(f, h)}
	// A zero gzip header (no name, no time) keeps the digest stable.
	zw := gzip.NewWriter(counter)
	tw := tar.NewWriter(zw)
	p := &packer{tw: tw, snap: snap}
	if info.IsDir() {
		err = p.folder(src, "", nil)
	} else {
		err = p.file(src, filepath.Base(src), info)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("packing %s: %w", src, err)
	}
	snap.Digest = hex.EncodeToString(h.Sum(nil))
	snap.Size = counter.n
	return snap, nil
}

type packer struct {
	tw   *tar.Writer
	snap *Snapshot
}

// folder packs dir (at slash path rel under the root) with the ignore
// rules of its parents plus its own.
func (p *packer) folder(dir, rel string, sets []ruleSet) error {
	for _, name := range IgnoreFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			sets = append(sets[:len(sets):len(sets)], parseIgnore(rel, b))
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	entries, err := os.ReadDir(dir) // sorted by name: a stable order
	if err != nil {
		return err
	}
	for _, e := range entries {
		childRel := path.Join(rel, e.Name())
		full := filepath.Join(dir, e.Name())
		if e.IsDir() && e.Name() == ".git" {
			continue // a repository's history is not code
		}
		if ignored(sets, childRel, e.IsDir()) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if e.IsDir() {
			if err := p.header(&tar.Header{Name: childRel + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return err
			}
			if err := p.folder(full, childRel, sets); err != nil {
				return err
			}
			continue
		}
		if err := p.file(full, childRel, info); err != nil {
			return err
		}
	}
	return nil
}

// file packs one regular file or link; other kinds are skipped.
func (p *packer) file(full, rel string, info fs.FileInfo) error {
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(full)
		if err != nil {
			return err
		}
		joined := path.Join(path.Dir(rel), filepath.ToSlash(target))
		if filepath.IsAbs(target) || joined == ".." || strings.HasPrefix(joined, "../") {
			return fmt.Errorf("%s: link to %s points outside the folder; copy the file in or add the link to .amlignore", rel, target)
		}
		return p.header(&tar.Header{Name: rel, Typeflag: tar.TypeSymlink, Linkname: filepath.ToSlash(target), Mode: 0o777})
	case !info.Mode().IsRegular():
		return nil
	}
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	defer f.Close()
	mode := int64(0o644)
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	if err := p.header(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: mode, Size: info.Size()}); err != nil {
		return err
	}
	n, err := io.CopyN(p.tw, f, info.Size())
	if err != nil {
		return fmt.Errorf("%s: %w (did it change while packing?)", rel, err)
	}
	p.snap.Files++
	p.snap.Bytes += n
	return nil
}

func (p *packer) header(h *tar.Header) error {
	h.Format = tar.FormatPAX
	return p.tw.WriteHeader(h)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
