package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/archive"
)

// uploadArtifacts packs outputs/ and logs/ into a tar.gz and PUTs it. The
// archive is rebuilt on every attempt: it is cheap next to the job, and a
// half-written file from an earlier attempt cannot be sent.
func (j *job) uploadArtifacts(ctx context.Context) error {
	path := filepath.Join(j.dir, "artifacts.tar.gz")
	if err := os.MkdirAll(j.logsDir, 0o755); err != nil {
		return fmt.Errorf("packing artifacts: %w", err)
	}
	if err := j.keepLogFile(); err != nil {
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

// writeTarGz packs root's named folders into the file at path.
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
	return archive.Write(f, root, names...)
}

// keepLogFile creates the job's log file, empty, when the job printed
// nothing (the shipper creates it with the first line): every job's
// artifacts show its log.
func (j *job) keepLogFile() error {
	if _, err := os.Lstat(j.logFile()); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(j.logFile(), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// errNotEmpty stops emptyArtifacts' walk at the first byte to upload.
var errNotEmpty = errors.New("not empty")

// emptyArtifacts lists what outputs/ and logs/ hold when they hold no
// bytes: the empty files and the empty folders below outputs/ (with a
// trailing slash), by path below the job's folder. It reports false when
// there is something to upload (a non-empty file, a link, too many names,
// an unreadable folder): the archive is sent then. Such a job's final
// status carries the names instead of an upload, which saves packing an
// archive here and a request, a scratch folder and an extraction on the
// server (14 % of the server's CPU when it dispatched no-op jobs). nothing
// says outputs/ and logs/ hold no name at all.
func (j *job) emptyArtifacts() (names []string, nothing, ok bool) {
	for _, root := range []string{"outputs", "logs"} {
		err := filepath.WalkDir(filepath.Join(j.dir, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(j.dir, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			switch {
			case d.IsDir():
				if rel == root {
					return nil // the folder itself; users see files and named outputs
				}
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				_, err = f.ReadDir(1)
				f.Close()
				if errors.Is(err, io.EOF) {
					names = append(names, rel+"/")
					return nil
				}
				return err
			case d.Type().IsRegular():
				info, err := d.Info()
				if err != nil {
					return err
				}
				if info.Size() > 0 {
					return errNotEmpty
				}
				names = append(names, rel)
			default:
				return errNotEmpty // a link or a device: the archive says what it is
			}
			if len(names) > api.MaxEmptyArtifacts {
				return errNotEmpty
			}
			return nil
		})
		if err != nil {
			return nil, false, false
		}
	}
	nothing = len(names) == 0
	// The log file of a job that printed nothing, not created on the node.
	if _, err := os.Lstat(j.logFile()); errors.Is(err, fs.ErrNotExist) {
		rel, err := filepath.Rel(j.dir, j.logFile())
		if err != nil || len(names) >= api.MaxEmptyArtifacts {
			return nil, false, false
		}
		names = append(names, filepath.ToSlash(rel))
	} else {
		nothing = false
	}
	return names, nothing, true
}
