package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tideml/tide/api"
)

// jobState is what the agent keeps on disk for each assignment it holds, so
// that an agent that restarts (crash, upgrade) can still report it.
type jobState struct {
	Assignment api.Assignment        `json:"assignment"`
	Pid        int                   `json:"pid,omitempty"`
	StartTime  string                `json:"start_time,omitempty"`
	Final      *api.AssignmentStatus `json:"final,omitempty"`
}

func (j *job) statePath() string {
	return filepath.Join(j.a.cfg.Dir, "state", url.PathEscape(j.as.ID)+".json")
}

// saveState writes the job's state file so that an agent that crashes
// finds it whole: the first time aside, then renamed into place; later, when
// the document fits in one page, over the file in place. That spares
// creating a file and renaming it over the last, a quarter of the agent's
// CPU on no-op jobs (ext4 allocates an inode for each file). A write of at
// most one page at offset 0 is done whole or not at all even when the
// agent is killed (the kernel checks for a fatal signal between pages), and
// a crash before the file is cut to the new length leaves bytes after the
// document, which recover ignores.
func (j *job) saveState() {
	j.mu.Lock()
	st := jobState{Assignment: j.as, Final: j.final, StartTime: j.startTime}
	if j.handle != nil {
		st.Pid = j.handle.Pid()
	}
	saved := j.savedState
	j.mu.Unlock()
	b, err := json.Marshal(st)
	if err == nil {
		switch {
		case bytes.Equal(b, saved):
			return // unchanged (the inputs fetched, no checkpoint restored)
		case saved != nil && len(b) <= statePage && len(saved) <= statePage:
			err = overwrite(j.statePath(), b)
		default:
			err = writeFile(j.statePath(), b)
		}
		if err == nil {
			j.mu.Lock()
			j.savedState = b
			j.mu.Unlock()
		}
	}
	if err != nil {
		j.log.Warn("saving job state", slog.Any("error", err))
	}
}

// statePage is the most saveState writes in place: one page.
const statePage = 4096

// overwrite writes b over the existing file at path, from its start, and
// cuts the file to b's length.
func overwrite(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Truncate(int64(len(b)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFile writes b to path atomically (aside, then renamed).
func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readState reads a state file's first document: a crash while saveState
// overwrote the file may have left the end of a longer one after it.
func readState(path string) (jobState, error) {
	var st jobState
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.NewDecoder(bytes.NewReader(b)).Decode(&st)
	}
	return st, err
}

// recover picks up the assignments an earlier run of this agent left in its
// state folder. A finished one is reported again. One whose process still
// runs cannot be followed any more (its output went to the old agent), so
// its process group is killed and it is reported Failed; the server requeues
// it according to the job's retry rules.
func (a *agent) recover(ctx context.Context) {
	dir := filepath.Join(a.cfg.Dir, "state")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".json" {
			continue
		}
		st, err := readState(filepath.Join(dir, e.Name()))
		if err != nil {
			a.log.WarnContext(ctx, "unreadable job state; removing it", slog.String("file", e.Name()), slog.Any("error", err))
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		j := newJob(a, st.Assignment)
		final := st.Final
		if final == nil {
			if st.Pid > 0 && st.StartTime != "" && procStartTime(st.Pid) == st.StartTime {
				_ = syscall.Kill(-st.Pid, syscall.SIGKILL)
			}
			final = &api.AssignmentStatus{
				ID: st.Assignment.ID, NodeRank: st.Assignment.NodeRank, Status: api.JobFailed,
				Error: "the node's agent restarted while the job ran; its process was stopped",
				Time:  time.Now().UTC(),
			}
		}
		// Resend the lines the log file holds; the server keeps each NodeSeq once.
		j.logs.replay(j.logFile())
		final.LastNodeSeq = j.logs.last()
		j.final = final
		a.jobs[st.Assignment.ID] = j
		a.log.InfoContext(ctx, "recovered assignment from an earlier agent run", slog.String("assignment", st.Assignment.ID), slog.String("status", final.Status))
		a.wg.Go(func() {
			j.a.wg.Go(func() { j.logs.loop(a.jobCtx) })
			j.finish(*final)
			a.mu.Lock()
			delete(a.jobs, st.Assignment.ID)
			a.mu.Unlock()
		})
	}
}

// replay queues the lines of a job's log file again, numbered from 1 as
// they were the first time.
func (s *shipper) replay(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine+1024)
	for sc.Scan() {
		s.add("stdout", sc.Text())
	}
	if err := sc.Err(); err != nil {
		s.add("tide", fmt.Sprintf("error: reading %s after an agent restart: %v", filepath.Base(path), err))
	}
}
