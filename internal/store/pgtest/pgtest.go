// Package pgtest gives tests a real PostgreSQL database. It starts a
// throwaway cluster from the installed binaries (initdb, pg_ctl) and hands
// each test a new, empty database in it, so tests run against the same server
// production uses without sharing state.
//
// A package that calls Start from several tests should call Main from its
// TestMain: the package's tests then share one cluster, started on first use
// and stopped when they end, and each Start costs only a CREATE DATABASE.
// Without Main, every Start runs a cluster of its own.
//
// When TIDE_TEST_POSTGRES_URL is set (a postgres:// URL of a role that may
// create databases), Start creates its databases there instead. When the
// binaries are missing Start skips the test, unless the CI environment
// variable is set: then it fails, so CI cannot pass without testing
// PostgreSQL.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tideml/tide/internal/freeport"
)

// EnvURL names the environment variable that points tests at an existing
// server instead of starting one.
const EnvURL = "TIDE_TEST_POSTGRES_URL"

// errNoBinaries reports that PostgreSQL is not installed.
var errNoBinaries = errors.New("PostgreSQL binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin")

var (
	mainActive atomic.Bool
	sharedOnce sync.Once
	shared     *cluster
	sharedErr  error
	dbCounter  atomic.Int64
)

// Main runs a package's tests with one shared cluster and stops it at the
// end. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with work of its own after the tests: it
// returns the exit code instead of exiting.
func Run(m *testing.M) int {
	mainActive.Store(true)
	code := m.Run()
	if shared != nil {
		if err := shared.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping PostgreSQL: %v\n", err)
		}
	}
	return code
}

// Start returns the URL of a new, empty database, dropped when the test ends.
func Start(t testing.TB) (url string) {
	t.Helper()
	ctx := context.Background()
	admin := os.Getenv(EnvURL)
	if admin == "" {
		c := clusterFor(t)
		admin = c.adminURL()
	}
	name := fmt.Sprintf("tide_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	if err := adminExec(ctx, admin, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// FORCE ends the connections a failed test left open.
		err := adminExec(context.Background(), admin, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
		if err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	u, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	return u
}

// clusterFor returns the shared cluster under Main, or a cluster of the
// test's own.
func clusterFor(t testing.TB) *cluster {
	t.Helper()
	if mainActive.Load() {
		sharedOnce.Do(func() { shared, sharedErr = startCluster(context.Background()) })
		if sharedErr != nil {
			fail(t, sharedErr)
		}
		return shared
	}
	c, err := startCluster(context.Background())
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: stopping PostgreSQL: %v", err)
		}
	})
	return c
}

func fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errNoBinaries) && os.Getenv("CI") == "" {
		t.Skipf("pgtest: %v; install PostgreSQL or set %s to run this test", err, EnvURL)
	}
	t.Fatalf("pgtest: %v", err)
}

func adminExec(ctx context.Context, url, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns url with its database replaced by name.
func withDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%q: want a postgres:// URL", raw)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// cluster is a PostgreSQL server running from a temporary directory.
type cluster struct {
	dir    string
	bin    string
	port   int
	runAs  *user.User // nil: run as the current user
	stopMu sync.Mutex
	done   bool
}

func (c *cluster) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// findBinaries returns the directory holding initdb and pg_ctl: the one on
// PATH, else the newest /usr/lib/postgresql/N/bin (Debian keeps them there).
func findBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errNoBinaries
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func startCluster(ctx context.Context) (*cluster, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: the directory must outlive the first test when the
	// cluster is shared, and a non-root server user must be able to reach
	// it (test temp dirs are private to root).
	dir, err := os.MkdirTemp("", "tide-pgtest-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and initdb refuses root: create a 'postgres' system user (%w)", err)
		}
		c.runAs = u
		if err := chown(dir, u); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	// A port nothing else takes (see freeport), kept across Restart; should
	// a program outside the tests bind it first, try another.
	for attempt := 1; ; attempt++ {
		c.port, err = freeport.Get()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		err = c.start(ctx)
		if err == nil {
			return c, nil
		}
		if attempt == 3 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// start starts the server on c.port.
func (c *cluster) start(ctx context.Context) error {
	// fsync is off: the data is thrown away, and a Restart stops only the
	// server, not the machine, so the operating system keeps what was
	// written. Commits do write their WAL, so a Restart loses nothing.
	opts := strings.Join([]string{
		"-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=500", "-c", "shared_buffers=32MB",
	}, " ")
	out, err := c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "server.log"),
		"-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// Cluster is a PostgreSQL server of one test's own, which the test may stop
// and start again (to test how tide rides out a database restart).
type Cluster struct {
	c *cluster
}

// NewCluster starts a server for t and stops it when t ends. It skips or
// fails t, as Start does, when PostgreSQL is not installed.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster(context.Background())
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("pgtest: stopping PostgreSQL: %v", err)
		}
	})
	return &Cluster{c: c}
}

// Database creates a new, empty database and returns its URL.
func (c *Cluster) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("tide_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	if err := adminExec(context.Background(), c.c.adminURL(), `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	u, err := withDatabase(c.c.adminURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Stop stops the server at once, ending every session as a crash would.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := c.c.run(context.Background(), "pg_ctl", "-D", filepath.Join(c.c.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts a stopped server again on the same port with the same data.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.c.start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Restart stops the server, waits down, and starts it again.
func (c *Cluster) Restart(t testing.TB, down time.Duration) {
	t.Helper()
	c.Stop(t)
	<-time.After(down)
	c.Start(t)
}
func (c *cluster) stop() error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.done {
		return nil
	}
	c.done = true
	// immediate: the data is thrown away, so no need to wait for a checkpoint.
	out, err := c.run(context.Background(), "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return os.RemoveAll(c.dir)
}

// run runs a PostgreSQL binary as the cluster's user.
func (c *cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.runAs != nil {
		if err := runAs(cmd, c.runAs); err != nil {
			return nil, err
		}
	}
	return cmd.CombinedOutput()
}
