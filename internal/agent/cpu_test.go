package agent

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A busy child shows up as CPU use; nothing running shows as none.
func TestCPUSamplerSeesBusyDescendants(t *testing.T) {
	s := cpuSampler{root: os.Getpid()}
	s.sample(time.Now())
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The loop needs a few clock ticks of CPU to show.
		if pct := s.sample(time.Now()); pct > 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a busy child never showed up as CPU use")
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	s.sample(time.Now())
	time.Sleep(300 * time.Millisecond) // a window with no child: measures, does not wait for a condition
	if pct := s.sample(time.Now()); pct > 20 {
		t.Fatalf("CPU %.1f %% with no child running", pct)
	}
}
