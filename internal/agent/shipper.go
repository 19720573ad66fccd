package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
)

// Log batching: a line leaves at once when no batch left in the last
// flushInterval (a job's first line, a quiet job's lines); else it waits
// until flushInterval after that batch, or until flushLines lines wait. So
// a chatty job sends at most one request per flushInterval (and per
// flushLines lines), and no line waits longer than flushInterval.
const (
	flushLines = 100
	maxBatch   = 1000
)

var flushInterval = 50 * time.Millisecond // a variable for tests

// maxPending caps the lines a shipper keeps in memory. Beyond it (a chatty
// job while the server is away) lines go to a spool file in the job's
// .tide folder and are read back in order as the server takes them, so the
// agent's memory stays bounded and no line is lost. A variable for tests.
var maxPending = 50_000

// shipper numbers a job's log lines (NodeSeq, dense from 1), writes them to
// the node's log file (job.logFile) and sends them to the server in
// batches. Lines stay queued until the server took them, so nothing is lost
// while it restarts: in memory up to maxPending, then in a spool file.
type shipper struct {
	j *job

	mu sync.Mutex
	// file is filePath once opened (copyTo).
	file     *os.File
	filePath string
	pending  []api.LogLine
	seq      int64
	closed   bool
	// spooled lines were written to spoolW and not yet read back through
	// spoolR; while any are, new lines go there too, to keep the order.
	spooled int
	spoolW  *os.File
	spoolR  *bufio.Reader
	spoolF  *os.File
	// spoolNext is the NodeSeq the next spooled line should have, for a
	// line that cannot be read back.
	spoolNext int64

	kick chan struct{}
	done chan struct{}
}

func newShipper(j *job) *shipper {
	return &shipper{j: j, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// copyTo makes the shipper copy every line to path, a file it creates
// with the first line: a job that prints nothing costs no file here
// (emptyArtifacts and uploadArtifacts still show it, empty).
func (s *shipper) copyTo(path string) {
	s.mu.Lock()
	s.filePath = path
	s.mu.Unlock()
}

// add queues one line.
func (s *shipper) add(stream, text string) {
	now := time.Now().UTC()
	for _, m := range s.j.as.Masks {
		text = strings.ReplaceAll(text, m, "***")
	}
	// No store keeps a NUL (PostgreSQL refuses it), and a refused batch
	// would be sent again for ever: a job printing binary data must end.
	text = strings.ReplaceAll(text, "\x00", "\uFFFD")
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.seq++
	line := api.LogLine{Attempt: s.j.as.Attempt, Node: s.j.as.NodeRank, NodeSeq: s.seq, Time: now, Stream: stream, Text: text}
	if (s.spooled == 0 && len(s.pending) < maxPending) || s.spool(line) != nil {
		// A spool that cannot be written keeps the line in memory.
		s.pending = append(s.pending, line)
	}
	n := len(s.pending)
	if s.file == nil && s.filePath != "" {
		f, err := os.OpenFile(s.filePath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			s.j.log.Warn("opening the job's log file; its lines are sent, not kept on the node", slog.Any("error", err))
		}
		s.file, s.filePath = f, ""
	}
	if s.file != nil {
		_, _ = fmt.Fprintln(s.file, text)
	}
	s.mu.Unlock()
	if n == 1 || n >= flushLines {
		s.signal()
	}
}

func (s *shipper) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// spoolPath is the job's spool file.
func (s *shipper) spoolPath() string { return filepath.Join(s.j.dir, ".tide", "log-spool.jsonl") }

// spool appends line to the spool file. s.mu is held.
func (s *shipper) spool(line api.LogLine) error {
	if s.spoolW == nil {
		path := s.spoolPath()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		w, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		r, err := os.Open(path)
		if err != nil {
			w.Close()
			return err
		}
		s.spoolW, s.spoolF, s.spoolR = w, r, bufio.NewReader(r)
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	if _, err := s.spoolW.Write(append(b, '\n')); err != nil {
		return err
	}
	if s.spooled == 0 {
		s.spoolNext = line.NodeSeq
	}
	s.spooled++
	return nil
}

// refill moves spooled lines back into memory while there is room for a
// batch, and removes the spool once it is read. s.mu is held.
func (s *shipper) refill() {
	for s.spooled > 0 && len(s.pending) < maxBatch {
		b, err := s.spoolR.ReadBytes('\n')
		var line api.LogLine
		if err == nil {
			err = json.Unmarshal(b, &line)
		}
		if err != nil {
			// A disk failure: the file is ours and holds spooled whole
			// lines. Say so in the line's place, keeping NodeSeq dense so
			// the job's log still ends; the text is in logs/ on the node.
			line = api.LogLine{Attempt: s.j.as.Attempt, Node: s.j.as.NodeRank, NodeSeq: s.spoolNext, Time: time.Now().UTC(), Stream: "tide",
				Text: fmt.Sprintf("error: a log line was lost reading it back from %s (%v); the node's logs/ folder has it", s.spoolPath(), err)}
		}
		// The next line follows this one (a line the spool could not
		// take went to memory instead and leaves a gap here).
		s.spoolNext = line.NodeSeq + 1
		s.pending = append(s.pending, line)
		s.spooled--
	}
	if s.spooled == 0 && s.spoolW != nil {
		s.spoolW.Close()
		s.spoolF.Close()
		s.spoolW, s.spoolF, s.spoolR = nil, nil, nil
		_ = os.Remove(s.spoolPath())
	}
}

// last is the NodeSeq of the last line produced.
func (s *shipper) last() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// close stops accepting lines; loop sends what is queued and ends.
func (s *shipper) close() {
	s.mu.Lock()
	s.closed = true
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
	s.mu.Unlock()
	s.signal()
}

// loop sends batches until the shipper is closed and empty, or ctx is done.
func (s *shipper) loop(ctx context.Context) {
	defer close(s.done)
	failures := 0
	var sent time.Time // when the last batch left
	for {
		s.mu.Lock()
		s.refill()
		n, closed := len(s.pending), s.closed
		s.mu.Unlock()
		if n == 0 {
			if closed {
				return
			}
			select {
			case <-s.kick:
			case <-ctx.Done():
				return
			}
			continue
		}
		if n < flushLines && !closed {
			if wait := flushInterval - time.Since(sent); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.kick:
				case <-ctx.Done():
					t.Stop()
					return
				}
				t.Stop()
				continue
			}
		}
		s.mu.Lock()
		batch := append([]api.LogLine(nil), s.pending[:min(n, maxBatch)]...)
		s.mu.Unlock()
		sent = time.Now()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.j.a.client.postJSON(rctx, s.j.path("logs"), api.LogBatch{Lines: batch}, nil)
		cancel()
		if err != nil && !permanent(err) {
			d := s.j.a.backoff(failures)
			failures++
			s.j.log.WarnContext(ctx, "sending log lines failed; keeping them", slog.Any("error", err), slog.Int("lines", n), slog.Duration("retry_after", d))
			if !sleepCtx(ctx, d) {
				return
			}
			continue
		}
		if err != nil {
			// The server refuses these lines for good (an assignment it no
			// longer knows): drop them rather than block the job's end.
			s.j.log.ErrorContext(ctx, "server refused log lines; dropping them", slog.Any("error", err), slog.Int("lines", len(batch)))
		}
		failures = 0
		s.mu.Lock()
		s.pending = s.pending[len(batch):]
		s.mu.Unlock()
	}
}
