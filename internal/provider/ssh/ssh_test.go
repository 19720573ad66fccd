package ssh_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/providertest"
	"github.com/tideml/tide/internal/provider/ssh"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestMain builds the sshd lab, and makes the test binary double as the
// agent: the provider copies this binary to the hosts and starts it with
// TIDE_TEST_AGENT=1 and the agent's real flags.
func TestMain(m *testing.M) { providertest.AgentMain(m, startLab) }

func open(t *testing.T, settings map[string]any) provider.Provider {
	t.Helper()
	return providertest.Open(t, ssh.Factory, settings)
}

// deleteAll deletes every node left, so no agent outlives the test.
func deleteAll(t *testing.T, settings map[string]any) {
	providertest.DeleteAll(t, func() provider.Provider { return open(t, settings) })
}

func TestConformance(t *testing.T) {
	l := requireLab(t)
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		settings := l.settings(l.shared(), 2, "")
		deleteAll(t, settings)
		return func() provider.Provider { return open(t, settings) }
	})
}

func TestCapacityAndHostKeys(t *testing.T) {
	l := requireLab(t)
	ctx := t.Context()
	kh, err := l.KnownHosts()
	if err != nil {
		t.Fatal(err)
	}
	settings := l.settings(l.shared(), 1, kh)
	deleteAll(t, settings)
	// A stale binary on a host is replaced before an agent starts.
	bins := make([]string, len(l.Hosts))
	for i, h := range l.Hosts {
		bins[i] = filepath.Join(l.shared(), h.NS, "bin", "tide")
		if err := os.MkdirAll(filepath.Dir(bins[i]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bins[i], []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := open(t, settings)
	// Three concurrent Creates on two capacity-1 hosts: two succeed, on
	// different hosts, and one finds no room.
	type result struct {
		n   *provider.Node
		err error
	}
	results := make(chan result, 3)
	for i := range 3 {
		go func() {
			n, err := p.Create(ctx, providertest.Request(fmt.Sprintf("cap-%d", i)))
			results <- result{n, err}
		}()
	}
	hosts := map[string]bool{}
	full := 0
	for range 3 {
		r := <-results
		switch {
		case r.err == nil:
			hosts[strings.Split(r.n.ProviderID, "/pid/")[0]] = true
		case provider.IsInsufficientCapacity(r.err):
			full++
		default:
			t.Fatalf("Create with known_hosts: %v", r.err)
		}
	}
	exe, _ := os.Executable()
	want, _ := os.ReadFile(exe)
	for _, b := range bins {
		if got, _ := os.ReadFile(b); !bytes.Equal(got, want) {
			t.Errorf("%s: not replaced by the server's binary", b)
		}
	}
	if len(hosts) != 2 || full != 1 {
		t.Errorf("three Creates on two capacity-1 hosts: nodes on %v, %d insufficient capacity; want both hosts and 1", hosts, full)
	}

	// A host whose key is not the pinned one is refused, naming both keys,
	// and nothing is started.
	bad := l.settings(t.TempDir(), 1, "")
	other := l.Hosts[1].HostKey
	for _, h := range bad["hosts"].([]any) {
		h.(map[string]any)["host_key"] = other
	}
	bad["hosts"] = bad["hosts"].([]any)[:1]
	pb := open(t, bad)
	_, err = pb.Create(ctx, providertest.Request("wrong-key"))
	if err == nil || !strings.Contains(err.Error(), "the host key changed") {
		t.Errorf("Create on a host with the wrong key: err = %v; want the host key changed", err)
	}
	if _, err := os.Stat(filepath.Join(bad["hosts"].([]any)[0].(map[string]any)["dir"].(string), "nodes", "wrong-key")); err == nil {
		t.Error("a node folder was made on a host whose key did not verify")
	}

	// Settings errors name the field.
	for _, tc := range []struct {
		settings map[string]any
		want     string
	}{
		{map[string]any{}, "hosts: at least one host"},
		{map[string]any{"hosts": []any{map[string]any{"address": "h", "key_file": l.ClientKey}}}, "hosts[0].host_key: required"},
		{map[string]any{"hosts": []any{map[string]any{"address": "h", "port": 70000, "host_key": other, "key_file": l.ClientKey}}}, "hosts[0].port"},
		{map[string]any{"hosts": []any{map[string]any{"adress": "h"}}}, "hosts[0].adress: unknown host setting"},
		{map[string]any{"host": 1}, "host: unknown setting"},
		{map[string]any{"hosts": []any{map[string]any{"address": "h", "host_key": other, "gpus": "all"}}}, "hosts[0].gpus: want auto or a list"},
		{map[string]any{"hosts": []any{map[string]any{"address": "h", "host_key": other, "gpus": []any{0, 0}}}}, "hosts[0].gpus: device 0 is listed twice"},
		{map[string]any{"known_hosts": kh, "hosts": []any{map[string]any{"address": "10.9.9.9", "key_file": l.ClientKey}}}, "10.9.9.9:22 is not in known_hosts"},
	} {
		_, err := ssh.Factory("lab", tc.settings, provider.Deps{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %v: err = %v; want %q", tc.settings, err, tc.want)
		}
	}
}

// TestHostCutOff checks that a host that stops answering is marked down:
// the first call waits for its timeout, later ones fail at once (the
// controller's loop never waits on a dead host at every turn), and calls
// go through again soon after the host is back.
func TestHostCutOff(t *testing.T) {
	l := requireLab(t)
	ctx := t.Context()
	settings := l.settings(t.TempDir(), 1, "")
	settings["hosts"] = settings["hosts"].([]any)[1:]
	p := open(t, settings)
	if _, err := p.Get(ctx, "nothing"); !provider.IsNotFound(err) {
		t.Fatalf("Get on a reachable host: %v; want NotFound", err)
	}
	restore := l.cut(t, 1)
	var ue *ssh.UnreachableError
	if _, err := p.Get(ctx, "nothing"); !errors.As(err, &ue) {
		t.Fatalf("Get on a host cut off: %v; want *UnreachableError", err)
	}
	start := time.Now()
	_, err := p.Get(ctx, "nothing")
	if took := time.Since(start); !errors.As(err, &ue) || !strings.Contains(err.Error(), "unreachable since") || took > time.Second {
		t.Errorf("second Get on a host cut off: %v after %s; want an immediate *UnreachableError", err, took)
	}
	restore()
	if !servertest.Poll(ctx, 20*time.Second, func() bool {
		_, err := p.Get(ctx, "nothing")
		return provider.IsNotFound(err)
	}) {
		t.Errorf("Get after the host came back: %v; want NotFound", err)
	}
}
