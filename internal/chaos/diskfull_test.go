package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// TestDiskFull fills the file system of the server's data dir (a small
// tmpfs) while a job prints its log: a submission is refused with an error
// that says the disk is full, the running job's log is complete and in
// order once space frees, and the server recovers by itself.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a tide server, agents and jobs")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the disk-full test mounts a tmpfs and needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v\n%s", data, err, out)
	}
	// Cleanups run last-registered first: the server and its agents are
	// gone before the unmount.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", data).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v\n%s", data, err, out)
		}
	})
	s := newServer(t, options{data: data})
	s.createCompute("name: full\ntype: amlcompute\nsize: Standard_DS1_v2\nmin_instances: 2\nmax_instances: 2\nidle_time_before_scale_down: 600\n")
	ctx := context.Background()
	start := time.Now()
	const lines = 200
	s.submit(fmt.Sprintf("name: logger\ncompute: full\ncommand: for i in $(seq 1 %d); do echo \"line $i\"; sleep 0.05; done\n", lines))
	waitFor(t, "the logger's first lines", 60*time.Second, func() bool {
		ls, err := s.client.Logs(ctx, "default", "logger", 0)
		return err == nil && len(ls) > 5
	})

	// Fill the disk.
	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	// A submission is refused, saying why.
	j, err := spec.ParseJob("job.yml", []byte("name: while-full\ncompute: full\ncommand: echo hi\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.client.CreateJob(ctx, "default", j)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.StatusCode != 507 || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "data dir") {
		t.Errorf("submitting with the disk full: %v; want 507 saying the data dir has no space left", err)
	}
	time.Sleep(2 * time.Second)

	// Space frees: the server recovers by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.submit("name: after-full\ncompute: full\ncommand: echo recovered\n")
	for _, n := range []string{"logger", "after-full"} {
		var j *api.Job
		waitFor(t, n+" to end", 120*time.Second, func() bool {
			j, err = s.client.Job(ctx, "default", n)
			return err == nil && api.JobTerminal(j.Status)
		})
		if j.Status != api.JobCompleted {
			t.Errorf("job %s: %s (%s)", n, j.Status, j.Error)
		}
	}
	// The log of the job that ran through it is whole and in order.
	ls, err := s.client.Logs(ctx, "default", "logger", 0)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	var got []string
	for _, l := range ls {
		got = append(got, l.Text)
	}
	for i := 1; i <= lines; i++ {
		if i > len(got) || got[i-1] != fmt.Sprintf("line %d", i) {
			lost++
		}
	}
	if lost > 0 || len(got) != lines {
		t.Errorf("the logger's log has %d lines, %d out of place; want line 1 .. line %d:\n%s", len(got), lost, lines, strings.Join(got, "\n"))
	}
	record(row{scenario: "disk full in the data dir (48 MB tmpfs)", jobs: 2, lost: lost, took: time.Since(start).Round(time.Second).String()})
}
