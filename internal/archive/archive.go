// Package archive writes and safely unpacks the tar.gz archives tide moves
// between nodes and the server (job artifacts; code snapshots). Unpacking
// never writes outside its destination: absolute paths, ".." and links that
// escape are rejected, and a size limit bounds what an archive may expand to.
package archive

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrTooLarge is returned when an archive expands beyond the limit.
var ErrTooLarge = errors.New("archive too large")

// Extract unpacks a tar.gz stream into dir, which it creates. limit bounds
// the total size of the files in bytes (0: no limit).
func Extract(r io.Reader, dir string, limit int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := entries(r, limit, func(h *tar.Header, name string, body io.Reader) error {
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := noLinkOnPath(dir, name); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeDir {
			// A file or link replaces an earlier link of the same name
			// (two nodes upload the same outputs); writing through the old
			// link could leave the folder.
			if info, err := os.Lstat(dst); err == nil && info.Mode()&fs.ModeSymlink != 0 {
				if err := os.Remove(dst); err != nil {
					return err
				}
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(body, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("writing %s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.Symlink(h.Linkname, dst)
		}
		return nil
	})
	return err
}

// Check reads a tar.gz stream to its end and applies Extract's rules
// without writing anything, so a server can refuse a bad archive when it is
// uploaded rather than when a node unpacks it. It returns the total size of
// the files.
func Check(r io.Reader, limit int64) (int64, error) {
	return entries(r, limit, func(*tar.Header, string, io.Reader) error { return nil })
}

// entries reads a tar.gz stream and calls visit for each entry with its
// cleaned name, after rejecting absolute paths, paths that leave the
// folder, links that escape it, special files, and a total file size above
// limit (0: no limit). It returns the total file size.
func entries(r io.Reader, limit int64, visit func(h *tar.Header, name string, body io.Reader) error) (int64, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return 0, fmt.Errorf("reading archive: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// Drain the gzip trailer so a truncated stream is an error.
			if _, err := io.Copy(io.Discard, zr); err != nil {
				return total, fmt.Errorf("reading archive: %w", err)
			}
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("reading archive: %w", err)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return total, err
		}
		if name == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			total += h.Size
			if limit > 0 && total > limit {
				return total, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
			}
		case tar.TypeSymlink:
			target := h.Linkname
			if filepath.IsAbs(target) {
				return total, fmt.Errorf("archive entry %q: link to absolute path %q is not allowed", h.Name, target)
			}
			if _, err := cleanName(path.Join(path.Dir(name), target)); err != nil || !dotsLead(target) {
				return total, fmt.Errorf("archive entry %q: link %q escapes the folder", h.Name, target)
			}
		default:
			return total, fmt.Errorf("archive entry %q: unsupported type %q", h.Name, string(h.Typeflag))
		}
		if err := visit(h, name, tr); err != nil {
			return total, err
		}
	}
}

// dotsLead reports whether ".." appears only at the start of a link
// target. "a/.." is refused even though it looks harmless: if a is itself
// a link, the kernel resolves ".." from where a points, not lexically.
func dotsLead(target string) bool {
	leading := true
	for _, part := range strings.Split(target, "/") {
		switch {
		case part == "..":
			if !leading {
				return false
			}
		case part != "" && part != ".":
			leading = false
		}
	}
	return true
}

// noLinkOnPath refuses an entry whose parent folders include a link, so
// nothing is written through a link the archive made.
func noLinkOnPath(dir, name string) error {
	p := dir
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		info, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("archive entry %q: goes through the link %q", name, part)
		}
	}
	return nil
}

// cleanName returns a safe relative slash path, or an error for absolute
// paths and paths that leave the destination.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) {
		return "", fmt.Errorf("archive entry %q: absolute paths are not allowed", name)
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("archive entry %q: paths may not leave the folder", name)
	}
	return c, nil
}

// Write packs the named folders under root (those that exist) into a
// tar.gz stream. Symbolic links are stored as links, never followed, so a
// job cannot make its node upload files outside its folder; sockets, pipes
// and devices are skipped. The folders may still be written to: a file that
// vanishes during the walk is skipped, and a file that grows is stored with
// the size it had when its header was written.
func Write(w io.Writer, root string, folders ...string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, folder := range folders {
		err := filepath.WalkDir(filepath.Join(root, folder), func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := writeEntry(tw, root, p, d); !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("packing %s: %w", folder, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// writeEntry adds one walked path to tw.
func writeEntry(tw *tar.Writer, root, p string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	link := ""
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case !info.Mode().IsRegular() && !info.IsDir():
		return nil
	}
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return err
	}
	h.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		h.Name += "/"
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, h.Size)
	return err
}
