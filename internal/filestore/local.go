package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Local keeps the files in a folder.
type Local struct {
	root string
}

// NewLocal returns the store in the folder root, made when missing.
func NewLocal(root string) (*Local, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("storage folder: %w", err)
	}
	return &Local{root: root}, nil
}

func (l *Local) String() string { return l.root }

func (l *Local) path(name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(name)), nil
}

// Put implements Store: written aside, then renamed into place.
func (l *Local) Put(ctx context.Context, name string, r io.Reader) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	return err
}

// Open implements Store.
func (l *Local) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a file: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, name string) ([]File, error) {
	root, err := l.path(name)
	if err != nil {
		return nil, err
	}
	var out []File
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || isPart(p) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, File{Name: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	return out, err
}

// isPart reports a file Put is writing (or was, when the server stopped
// mid-upload): os.CreateTemp's ".part-*" makes .part- and digits.
func isPart(p string) bool {
	digits, ok := strings.CutPrefix(filepath.Base(p), ".part-")
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// RemoveParts removes the files Put was writing when a server stopped
// mid-upload, below the folders named, that were last written before
// before (a file being written is written to as it grows). It returns how
// many it removed.
func (l *Local) RemoveParts(before time.Time, folders ...string) (int, error) {
	n := 0
	var errs []error
	for _, folder := range folders {
		root, err := l.path(folder)
		if err != nil {
			return n, err
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.Type().IsRegular() || !isPart(p) {
				return nil
			}
			info, err := d.Info()
			if err != nil || !info.ModTime().Before(before) {
				return nil // gone meanwhile, or still being written
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				return nil
			}
			n++
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Exists implements Store.
func (l *Local) Exists(ctx context.Context, name string) (bool, error) {
	p, err := l.path(name)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// MakeFolder implements Store.
func (l *Local) MakeFolder(ctx context.Context, name string) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	return os.MkdirAll(p, 0o700)
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, name string) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	return os.RemoveAll(p)
}
