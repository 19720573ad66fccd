package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tideml/tide/internal/archive"
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
