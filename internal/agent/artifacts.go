package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
)

// uploadArtifacts packs outputs/ and logs/ into a tar.gz and PUTs it. The
// archive is rebuilt on every attempt: it is cheap next to the job, and a
// half-written file from an earlier attempt cannot be sent.
func (j *job) uploadArtifacts(ctx context.Context) error {
	path := filepath.Join(j.dir, "artifacts.tar.gz")
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return fmt.Errorf("packing artifacts: %w", err)
	}
	if err := writeTarGz(path, j.dir, "outputs", "logs"); err != nil {
		return fmt.Errorf("packing artifacts: %w", err)
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("packing artifacts: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("packing artifacts: %w", err)
	}
	req, err := j.a.client.newRequest(ctx, http.MethodPut, j.path("artifacts"), f, "application/gzip")
	if err != nil {
		return err
	}
	req.ContentLength = fi.Size()
	return j.a.client.send(req, nil)
}

// writeTarGz writes the folders names (relative to root) into a gzipped tar
// at path. Missing folders are skipped; symbolic links are stored as links,
// never followed, so a job cannot make the agent upload files outside its folder.
func writeTarGz(path, root string, names ...string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, name := range names {
		err := filepath.WalkDir(filepath.Join(root, name), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			if !info.Mode().IsRegular() && !info.IsDir() && link == "" {
				return nil // sockets, pipes, devices
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			hdr.Name = filepath.ToSlash(rel)
			if info.IsDir() {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			// The file may still grow (a leftover writer); copy what the
			// header announced.
			_, err = io.CopyN(tw, src, hdr.Size)
			return err
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
