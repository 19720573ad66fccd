package server

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tideml/tide/internal/filestore"
)

// staleScratch is how long a scratch file stays untouched before the
// server removes it at start: an upload being received (by this server or
// by another replica sharing the folder) writes to its file as it grows,
// and none takes hours between two writes.
const staleScratch = 6 * time.Hour

// storedFolders are the folders of the file store that uploads write to
// (blobs, checkpoints, artifacts and outputs).
var storedFolders = []string{"blobs", "checkpoints", "artifacts"}

// cleanScratch removes what uploads interrupted by a crash left: entries
// of DATA_DIR/tmp (an upload checked aside, artifacts or outputs being
// unpacked) and the local file store's partial files, untouched for
// staleScratch. Called at start, before the server takes any upload.
func (s *Server) cleanScratch(now time.Time) {
	before := now.Add(-staleScratch)
	n, err := removeStale(s.scratchDir(), before)
	if err != nil {
		s.log.Warn("removing stale scratch files", "dir", s.scratchDir(), "err", err)
	}
	if l, ok := s.files.(*filestore.Local); ok {
		m, err := l.RemoveParts(before, storedFolders...)
		if err != nil {
			s.log.Warn("removing partial files of interrupted uploads", "storage", l.String(), "err", err)
		}
		n += m
	}
	if n > 0 {
		s.log.Info("removed scratch files of interrupted uploads", "count", n, "untouched_for", staleScratch)
	}
}

// removeStale removes the entries of dir in which nothing was written
// since before, and returns how many it removed.
func removeStale(dir string, before time.Time) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if latest, err := lastWrite(p); err != nil || !latest.Before(before) {
			continue // in use, or gone meanwhile
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// lastWrite is the latest modification time of p and of everything below
// it.
func lastWrite(p string) (time.Time, error) {
	var latest time.Time
	err := filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(latest) {
			latest = info.ModTime()
		}
		return nil
	})
	return latest, err
}
