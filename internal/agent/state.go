package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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

// encode is json.Marshal(st) with st.Assignment given encoded: a job's
// state is saved three or four times, and encoding the whole assignment
// each time was half of saveState's cost.
func (st jobState) encode(assignment []byte) ([]byte, error) {
	b := make([]byte, 0, len(assignment)+128)
	b = append(append(b, `{"assignment":`...), assignment...)
	if st.Pid != 0 {
		b = strconv.AppendInt(append(b, `,"pid":`...), int64(st.Pid), 10)
	}
	if st.StartTime != "" {
		s, err := json.Marshal(st.StartTime)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"start_time":`...), s...)
	}
	if st.Final != nil {
		f, err := json.Marshal(st.Final)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"final":`...), f...)
	}
	return append(b, '}'), nil
}

// statePath is the job's state file ("" before its first save).
func (j *job) statePath() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.stateFile == nil {
		return ""
	}
	return j.stateFile.path
}

// saveState writes the job's state file so that an agent that crashes
// finds it whole. The file is one the agent keeps open for its jobs in
// turn (stateFiles), empty when a job takes it; a document of at most one
// page is written over it in place. That spares creating, opening and
// removing a file for each job, which on ext4 cost a quarter of the
// agent's CPU on no-op jobs: an inode allocated each time, and without a
// journal each allocation steps over the inodes freed in the last minutes.
// A write of at most one page at offset 0 is done whole or not at all even
// when the agent is killed (the kernel checks for a fatal signal between
// pages), and a crash before the file is cut to the new length leaves
// bytes after the document, which recover ignores. A longer document is
// written aside and renamed into place.
func (j *job) saveState() {
	j.mu.Lock()
	st := jobState{Final: j.final, StartTime: j.startTime}
	if j.handle != nil {
		st.Pid = j.handle.Pid()
	}
	var err error
	if j.asJSON == nil {
		j.asJSON, err = json.Marshal(j.as)
	}
	asJSON := j.asJSON
	saved, sf := j.savedState, j.stateFile
	j.mu.Unlock()
	var b []byte
	if err == nil {
		b, err = st.encode(asJSON)
	}
	if err == nil && bytes.Equal(b, saved) {
		return // unchanged (the inputs fetched, no checkpoint restored)
	}
	if err == nil && sf == nil {
		sf, err = j.a.states.take(filepath.Join(j.a.cfg.Dir, "state"))
		if err == nil {
			j.mu.Lock()
			j.stateFile = sf
			j.mu.Unlock()
		}
	}
	if err == nil {
		if len(b) <= statePage && len(saved) <= statePage {
			// (A file just taken is empty; a recovered job's may not be.)
			err = sf.overwrite(b, len(saved))
		} else {
			err = sf.replace(b)
		}
	}
	if err == nil {
		j.mu.Lock()
		j.savedState = b
		j.mu.Unlock()
	}
	if err != nil {
		j.log.Warn("saving job state", slog.Any("error", err))
	}
}

// releaseState empties the job's state file once the server took its
// final status, for the agent's next job.
func (j *job) releaseState() {
	j.mu.Lock()
	sf := j.stateFile
	j.stateFile = nil
	j.mu.Unlock()
	if sf != nil {
		j.a.states.release(sf)
	}
}

// stateFile is one of the agent's state files, opened for writing when
// first written.
type stateFile struct {
	path string
	f    *os.File
}

// statePage is the most saveState writes in place: one page.
const statePage = 4096

// overwrite writes b over the file from its start and cuts the file to
// b's length when it was longer (size: the file's length, -1 unknown).
func (sf *stateFile) overwrite(b []byte, size int) error {
	if sf.f == nil {
		f, err := os.OpenFile(sf.path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		sf.f, size = f, -1
	}
	if _, err := sf.f.WriteAt(b, 0); err != nil {
		return err
	}
	if size >= 0 && size <= len(b) {
		return nil // nothing after b to cut
	}
	return sf.f.Truncate(int64(len(b)))
}

// replace writes b to the file atomically (aside, then renamed).
func (sf *stateFile) replace(b []byte) error {
	tmp := sf.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, sf.path); err != nil {
		return err
	}
	sf.close() // the replaced file's; overwrite opens the new one
	return nil
}

func (sf *stateFile) close() {
	if sf.f != nil {
		_ = sf.f.Close()
		sf.f = nil
	}
}

// stateFiles are the agent's state files: one per job it holds, each
// emptied when its job is over and kept, open, for a later one.
type stateFiles struct {
	mu   sync.Mutex
	free []*stateFile
	next int
}

// take returns an empty state file in dir, one kept from an earlier job
// or a new one.
func (s *stateFiles) take(dir string) (*stateFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		sf := s.free[n-1]
		s.free = s.free[:n-1]
		return sf, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for {
		s.next++
		p := filepath.Join(dir, "job-"+strconv.Itoa(s.next)+".json")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // a recovered job's
		}
		if err != nil {
			return nil, err
		}
		return &stateFile{path: p, f: f}, nil
	}
}

// release empties sf and keeps it for the next job (or removes it when it
// cannot be emptied).
func (s *stateFiles) release(sf *stateFile) {
	err := os.ErrClosed
	if sf.f != nil {
		err = sf.f.Truncate(0)
	}
	if err != nil {
		sf.close()
		if os.Truncate(sf.path, 0) != nil {
			_ = os.Remove(sf.path)
			return
		}
	}
	s.mu.Lock()
	s.free = append(s.free, sf)
	s.mu.Unlock()
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
		path := filepath.Join(dir, e.Name())
		if fi, err := e.Info(); err == nil && fi.Size() == 0 {
			a.states.release(&stateFile{path: path}) // kept for a later job
			continue
		}
		st, err := readState(path)
		if err != nil {
			a.log.WarnContext(ctx, "unreadable job state; removing it", slog.String("file", e.Name()), slog.Any("error", err))
			_ = os.Remove(path)
			continue
		}
		j := newJob(a, st.Assignment)
		j.stateFile = &stateFile{path: path}
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
