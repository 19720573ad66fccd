// Package blob keeps the server's content-addressed blobs: the tar.gz
// snapshots of jobs' code folders and uploaded data inputs. A blob's name
// is the SHA-256 of its bytes, so the same folder uploaded twice is stored
// once, and a blob is checked (digest, size, safe archive entries) before
// it becomes visible.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"

	"github.com/tideml/tide/internal/archive"
	"github.com/tideml/tide/internal/filestore"
)

// Errors Put returns; callers test with errors.Is.
var (
	// ErrTooLarge: the upload or what it expands to exceeds the limit.
	ErrTooLarge = errors.New("larger than the server's max_data_size")
	// ErrDigest: the bytes do not hash to the name they were sent under.
	ErrDigest = errors.New("content does not match its SHA-256")
	// ErrArchive: the blob is not a tar.gz a node may unpack.
	ErrArchive = errors.New("not a safe tar.gz")
)

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidDigest reports whether d is a lower-case hex SHA-256.
func ValidDigest(d string) bool { return digestRE.MatchString(d) }

// Store keeps blobs in the server's file store, as blobs/DIGEST.tar.gz.
type Store struct {
	files filestore.Store
	tmp   string
	limit int64
}

// New returns a store keeping blobs in files; an upload is checked in a
// temporary file in the folder tmp first. limit bounds a blob's size and
// the total size of the files it holds (0: no limit).
func New(files filestore.Store, tmp string, limit int64) (*Store, error) {
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("blob upload folder: %w", err)
	}
	return &Store{files: files, tmp: tmp, limit: limit}, nil
}

// Limit is the size limit in bytes (0: none).
func (s *Store) Limit() int64 { return s.limit }

func name(digest string) string { return "blobs/" + digest + ".tar.gz" }

// Has reports whether the blob is stored.
func (s *Store) Has(ctx context.Context, digest string) bool {
	if !ValidDigest(digest) {
		return false
	}
	ok, err := s.files.Exists(ctx, name(digest))
	return ok && err == nil
}

// Open opens a stored blob and returns its size; an error wrapping
// fs.ErrNotExist when there is none.
func (s *Store) Open(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	if !ValidDigest(digest) {
		return nil, 0, fmt.Errorf("blob %q: %w", digest, fs.ErrNotExist)
	}
	return s.files.Open(ctx, name(digest))
}

// Put stores r under digest after checking that r hashes to it, stays
// within the limit and is a tar.gz that archive.Extract would unpack. A
// blob already stored is not written again.
func (s *Store) Put(ctx context.Context, digest string, r io.Reader) error {
	if !ValidDigest(digest) {
		return fmt.Errorf("blob name %q: want the lower-case hex SHA-256 of the content", digest)
	}
	tmp, err := os.CreateTemp(s.tmp, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	src := r
	if s.limit > 0 {
		src = io.LimitReader(r, s.limit+1)
	}
	n, err := io.Copy(io.MultiWriter(tmp, h), src)
	if err != nil {
		return fmt.Errorf("receiving blob: %w", err)
	}
	if s.limit > 0 && n > s.limit {
		return fmt.Errorf("%w (%d bytes)", ErrTooLarge, s.limit)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("%w: sent as %s, hashes to %s", ErrDigest, digest, got)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := archive.Check(tmp, s.limit); err != nil {
		if errors.Is(err, archive.ErrTooLarge) {
			return fmt.Errorf("%w (%d bytes): its files expand beyond it", ErrTooLarge, s.limit)
		}
		return fmt.Errorf("%w: %w", ErrArchive, err)
	}
	if s.Has(ctx, digest) {
		return nil
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := s.files.Put(ctx, name(digest), tmp); err != nil {
		return fmt.Errorf("storing blob %s in %s: %w", digest, s.files, err)
	}
	return nil
}
