package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tideml/tide/internal/archive"
)

// maxCheckpoint bounds the checkpoint archive the agent unpacks.
const maxCheckpoint = 4 << 30

// A job's checkpoint folder (TIDE_CHECKPOINT_DIR) outlives its attempts:
// the agent uploads it whenever an attempt ends with files in it, and a
// later attempt on another node starts with the latest upload unpacked in
// its own checkpoint folder. So a preempted or retried job resumes where
// it saved, wherever it runs next.

// restoreCheckpoint fills the checkpoint folder of a retried job from the
// server, unless this node already holds one (it ran an earlier attempt).
func (j *job) restoreCheckpoint(ctx context.Context) error {
	if j.as.Attempt <= 1 {
		return nil
	}
	if entries, err := os.ReadDir(j.checkpointDir); err == nil && len(entries) > 0 {
		return nil
	}
	return j.a.retry(ctx, "downloading the checkpoint", func(ctx context.Context) error {
		req, err := j.a.client.newRequest(ctx, http.MethodGet, j.path("checkpoint"), nil, "")
		if err != nil {
			return err
		}
		resp, err := j.a.client.hc.Do(req)
		if err != nil {
			j.a.client.failover()
			return fmt.Errorf("downloading the checkpoint: %w", err)
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return nil // no checkpoint was saved: the job starts afresh
		case resp.StatusCode != http.StatusOK:
			return &statusError{Code: resp.StatusCode, Body: resp.Status}
		}
		// The archive holds the folder under its own name.
		if err := archive.Extract(resp.Body, filepath.Dir(j.checkpointDir), maxCheckpoint); err != nil {
			return fmt.Errorf("unpacking the checkpoint: %w", err)
		}
		j.logs.add("tide", "restored the checkpoint saved by an earlier attempt into $TIDE_CHECKPOINT_DIR")
		return nil
	})
}

// saveCheckpoint uploads the checkpoint folder when it holds anything.
func (j *job) saveCheckpoint(ctx context.Context) error {
	entries, err := os.ReadDir(j.checkpointDir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the checkpoint folder: %w", err)
	}
	return j.a.retry(ctx, "uploading the checkpoint", func(ctx context.Context) error {
		path := filepath.Join(j.dir, "checkpoint.tar.gz")
		if err := writeTarGz(path, filepath.Dir(j.checkpointDir), filepath.Base(j.checkpointDir)); err != nil {
			return fmt.Errorf("packing the checkpoint: %w", err)
		}
		defer os.Remove(path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		req, err := j.a.client.newRequest(ctx, http.MethodPut, j.path("checkpoint"), f, "application/gzip")
		if err != nil {
			return err
		}
		req.ContentLength = fi.Size()
		return j.a.client.send(req, nil)
	})
}
