package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// maxSpare bounds the spare folders of each kind an agent keeps; a node
// runs one assignment at a time, so a few are enough.
const maxSpare = 8

// spareFolders are the folders of finished jobs that were left empty, kept
// for later jobs: a job folder (holding 1/outputs and 1/logs) and a
// checkpoint folder are renamed into place instead of made. Making a folder
// allocates an inode, and on ext4 without a journal each allocation steps
// over every inode freed in the last half-minute: a profile of 8 agents
// running no-op jobs found a third of their CPU there, making five folders
// per job. A rename allocates nothing. The folders a job is given are the
// same either way: present, empty, the agent's mode; the job's user is given
// them again (runtime.User.handOver) as for new ones.
type spareFolders struct {
	mu sync.Mutex
	// dir holds the spares, on the file system of the jobs' folders.
	dir string
	// perm is what a new folder's permissions are (0755 less the umask);
	// 0 when unknown, and nothing is kept.
	perm  fs.FileMode
	jobs  []string
	ckpts []string
	next  int
	// given is the assignment each checkpoint folder was last made for:
	// the folder's path is the job's, not its attempt's, and a retry on
	// this node may have been given it before the attempt before it was
	// kept.
	given     map[string]string
	fromSpare int // folders renamed into place, for tests
}

// open starts keeping spares in dir: it keeps those an earlier run of the
// agent left there that are still as they were kept, and removes the
// others. Until it is called (in tests), nothing is kept.
func (s *spareFolders) open(dir string) {
	s.dir, s.perm = dir, 0o755&^umask()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		n, _ := strconv.Atoi(e.Name()[min(1, len(e.Name())):])
		s.next = max(s.next, n)
		switch {
		case strings.HasPrefix(e.Name(), "j") && s.emptyJob(p, "1", false) && len(s.jobs) < maxSpare:
			s.jobs = append(s.jobs, p)
		case strings.HasPrefix(e.Name(), "c") && s.empty(p) && len(s.ckpts) < maxSpare:
			s.ckpts = append(s.ckpts, p)
		default:
			_ = os.RemoveAll(p)
		}
	}
}

// umask reads the process's umask from /proc (Linux 4.7 and later); it
// returns 0o777, which keeps no spare, when it cannot.
func umask() fs.FileMode {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o777
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return fs.FileMode(m) & fs.ModePerm
			}
		}
	}
	return 0o777
}

// make gives j its folders: its job folder (with outputs/ and logs/) and
// its checkpoint folder from the spares when there are some and the job
// has none yet, the rest made.
func (s *spareFolders) make(j *job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	attempt := filepath.Base(j.dir)
	if n := len(s.jobs); n > 0 && s.place(s.jobs[n-1], filepath.Dir(j.dir)) {
		s.jobs = s.jobs[:n-1]
		if attempt != "1" {
			if err := syscall.Rename(filepath.Join(filepath.Dir(j.dir), "1"), j.dir); err != nil {
				return fmt.Errorf("preparing job folder: %w", err)
			}
		}
	}
	if n := len(s.ckpts); n > 0 && s.place(s.ckpts[n-1], j.checkpointDir) {
		s.ckpts = s.ckpts[:n-1]
	}
	if s.given == nil {
		s.given = map[string]string{}
	}
	s.given[j.checkpointDir] = j.as.ID
	dirs := []string{j.outputsDir, j.logsDir, j.checkpointDir}
	for _, o := range j.as.Outputs {
		dirs = append(dirs, filepath.Join(j.outputsDir, o))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("preparing job folder: %w", err)
		}
	}
	return nil
}

// place renames the spare folder to dst, which must not be a folder with
// anything in it (an empty one is replaced); it reports whether it did.
// (syscall.Rename: os.Rename looks at dst first, a third of a rename's
// cost, to refuse replacing any folder.)
func (s *spareFolders) place(spare, dst string) bool {
	err := syscall.Rename(spare, dst)
	if errors.Is(err, fs.ErrNotExist) && os.MkdirAll(filepath.Dir(dst), 0o755) == nil {
		err = syscall.Rename(spare, dst)
	}
	if err == nil {
		s.fromSpare++
	}
	return err == nil
}

// keep takes the folders of j, whose final status the server took, as
// spares when nothing is in them. The job's folder is kept only when it is
// its job's only attempt folder here and holds outputs/ and logs/ alone,
// both empty: found so by the walk of its artifacts (emptied), which the
// job, ended, cannot change since, or looked at here.
func (s *spareFolders) keep(j *job, emptied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perm == 0 {
		return
	}
	attempt := filepath.Base(j.dir)
	if len(s.jobs) < maxSpare && s.emptyJob(filepath.Dir(j.dir), attempt, emptied) {
		spare := s.name("j")
		if syscall.Rename(filepath.Dir(j.dir), spare) == nil {
			if attempt == "1" || syscall.Rename(filepath.Join(spare, attempt), filepath.Join(spare, "1")) == nil {
				s.jobs = append(s.jobs, spare)
			}
		}
	}
	mine := s.given[j.checkpointDir] == j.as.ID
	if mine {
		delete(s.given, j.checkpointDir)
	}
	if mine && len(s.ckpts) < maxSpare && s.empty(j.checkpointDir) {
		spare := s.name("c")
		if syscall.Rename(j.checkpointDir, spare) == nil {
			s.ckpts = append(s.ckpts, spare)
		}
	}
}

func (s *spareFolders) name(kind string) string {
	if s.next == 0 {
		_ = os.MkdirAll(s.dir, 0o755)
	}
	s.next++
	return filepath.Join(s.dir, kind+strconv.Itoa(s.next))
}

// emptyJob reports whether the job folder p holds only the attempt folder,
// and that one only empty outputs/ and logs/ (known so when emptied), each
// a folder of the agent's mode.
func (s *spareFolders) emptyJob(p, attempt string, emptied bool) bool {
	if !s.holds(p, attempt) {
		return false
	}
	a := filepath.Join(p, attempt)
	if !s.holds(a, "logs", "outputs") {
		return false
	}
	for _, d := range []string{"outputs", "logs"} {
		if emptied && !s.ownMode(filepath.Join(a, d)) || !emptied && !s.empty(filepath.Join(a, d)) {
			return false
		}
	}
	return true
}

// empty reports whether p is an empty folder of the agent's mode.
func (s *spareFolders) empty(p string) bool { return s.holds(p) }

// ownMode reports whether p is a folder of the agent's mode.
func (s *spareFolders) ownMode(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir() && fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid) == s.perm
}

// holds reports whether p is a folder of the agent's mode holding exactly
// names (sorted). It lists the folder with plain system calls: os.Open
// offered each folder to the network poller first (five calls, refused),
// and a job's end looks at two to four folders.
func (s *spareFolders) holds(p string, names ...string) bool {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&0o7777 != uint32(s.perm) { // as ownMode
		return false
	}
	var buf [4096]byte
	got := make([]string, 0, len(names)+1)
	for len(got) <= len(names) {
		n, err := syscall.Getdents(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if n <= 0 {
			break
		}
		_, _, got = syscall.ParseDirent(buf[:n], len(names)+1-len(got), got)
	}
	if len(got) != len(names) {
		return false
	}
	if len(got) == 2 && got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	for i := range names {
		if got[i] != names[i] {
			return false
		}
	}
	return true
}
