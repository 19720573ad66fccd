// Package azuritetest starts Azurite, Microsoft's Azure Storage emulator
// (npm package azurite), for tests: a real blob service on a free port of
// 127.0.0.1, in memory, stopped at the test's end. A test that needs it
// skips when azurite-blob is not installed, unless the CI environment
// variable is set: then it fails, so CI cannot pass without it.
package azuritetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/azureblob"
	"github.com/tideml/tide/internal/freeport"
)

// Azurite's well-known development account.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Azurite is a running blob service.
type Azurite struct {
	// URL is the account's blob service URL, for a datastore's
	// endpoint_url.
	URL string
	cmd *exec.Cmd
}

// Start runs azurite-blob until the test ends.
func Start(t testing.TB) *Azurite {
	t.Helper()
	bin, err := exec.LookPath("azurite-blob")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("azurite-blob not found: CI must install it (npm install -g azurite, run with Debian's nodejs)")
		}
		t.Skip("azurite-blob not installed (npm install -g azurite)")
	}
	// The port is free when asked for, but another test's server may take
	// it before Azurite binds it: then Azurite exits, or a foreign server
	// answers. Either way, start again on another port.
	var last string
	for range 5 {
		az, out, ok := start(t, bin)
		if ok {
			return az
		}
		last = out
	}
	t.Fatalf("azurite-blob did not start on a free port in 5 tries; last output: %s", last)
	return nil
}

// start runs azurite-blob on a port free now and waits until Azurite
// itself answers there. It reports false, with Azurite's output, when
// Azurite exited (its port was taken) or another server answered.
func start(t testing.TB, bin string) (*Azurite, string, bool) {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out strings.Builder
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", fmt.Sprint(port),
		"--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck", "--silent")
	cmd.Stdout, cmd.Stderr, cmd.Dir = &out, &out, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting azurite-blob: %v", err)
	}
	az := &Azurite{URL: fmt.Sprintf("http://127.0.0.1:%d/%s", port, Account), cmd: cmd}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	// Generous: Azurite took 13-15 s to answer at load 16 on 2 cores, and
	// more than 60 s in a CI run at load 19-23.
	deadline := time.Now().Add(180 * time.Second)
	for {
		resp, err := http.Get(az.URL + "?comp=list")
		if err == nil {
			resp.Body.Close()
			if !strings.HasPrefix(resp.Header.Get("Server"), "Azurite-Blob") {
				stop()
				return nil, fmt.Sprintf("port %d answered by %q, not Azurite", port, resp.Header.Get("Server")), false
			}
			t.Cleanup(stop)
			return az, "", true
		}
		select {
		case <-exited:
			return nil, out.String(), false
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("azurite-blob did not answer on port %d within 180s: %s", port, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Datastore is an azure_blob datastore of container on this Azurite, with
// the development account's key.
func (az *Azurite) Datastore(name, container string) *api.Datastore {
	return &api.Datastore{Name: name, Type: api.DatastoreAzureBlob, AccountName: Account, ContainerName: container,
		EndpointURL: az.URL, Credentials: &api.DatastoreCredentials{AccountKey: Key}}
}

// Container creates container and uploads files (name -> content) to it,
// and returns the container's store.
func (az *Azurite) Container(t testing.TB, container string, files map[string]string) *azureblob.Store {
	t.Helper()
	st, err := azureblob.New(az.Datastore("setup", container))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.CreateContainer(ctx); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := st.UploadBytes(ctx, name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}
