package server_test

// End-to-end tests of code snapshots and data inputs: real agents fetch
// inputs from an http server on 127.0.0.1 and unpack code the real CLI
// uploaded.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// tarGz builds a tar.gz of files (name -> content; a name ending in "@"
// is a link to the content instead).
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}
		if link, ok := strings.CutSuffix(name, "@"); ok {
			h = &tar.Header{Name: link, Typeflag: tar.TypeSymlink, Linkname: body}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestHTTPInputsForReal(t *testing.T) {
	folder := tarGz(t, map[string]string{"iris/iris.csv": "5.1,3.5,setosa\n", "README": "iris data\n"})
	hang := make(chan struct{})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/data/hang.csv":
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		case "/data/iris.csv":
			w.Write([]byte("5.1,3.5,1.4,0.2,setosa\n"))
		case "/data/iris.tar.gz":
			w.Write(folder)
		default:
			http.NotFound(w, r)
		}
	}))
	defer web.Close()
	defer close(hang)
	in, _ := newServer(t)
	createCompute(t, in, cluster)

	file := submit(t, in, "command: cat ${{inputs.iris_csv}}\ncompute: cpu-cluster\ninputs:\n  iris_csv:\n    type: uri_file\n    path: "+web.URL+"/data/iris.csv\n")
	dir := submit(t, in, "command: ls ${{inputs.d}} ${{inputs.d}}/iris; test ! -w ${{inputs.d}}/README || id -u | grep -qx 0\ncompute: cpu-cluster\ninputs:\n  d:\n    type: uri_folder\n    path: "+web.URL+"/data/iris.tar.gz\n")
	for _, c := range []struct {
		job  *api.Job
		want []string
	}{
		{file, []string{"setosa", "inputs.iris_csv: fetching " + web.URL}},
		{dir, []string{"README", "iris.csv"}},
	} {
		j := waitJob(t, in, c.job.Name, 60*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s)\n%s", j.Name, j.Status, j.Error, text)
		}
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: log lacks %q:\n%s", j.Name, w, text)
			}
		}
	}

	// Unreachable and missing URLs fail the job with the reason; the
	// server keeps serving.
	dead := submit(t, in, "command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: http://127.0.0.1:1/nothing.csv\n")
	missing := submit(t, in, "command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: "+web.URL+"/data/missing.csv\n")
	for _, c := range []struct {
		job  *api.Job
		want string
	}{
		{dead, "inputs.f: http://127.0.0.1:1/nothing.csv: fetching: "},
		{missing, "the server answered 404 Not Found"},
	} {
		j := waitJob(t, in, c.job.Name, 60*time.Second)
		if j.Status != api.JobFailed || !strings.Contains(j.Error, c.want) {
			t.Errorf("%s: status %s, error %q; want Failed with %q", j.Name, j.Status, j.Error, c.want)
		}
	}
	if err := in.client.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A job canceled while its input downloads stops at once.
	slow := submit(t, in, "command: cat ${{inputs.f}}\ncompute: cpu-cluster\ninputs:\n  f:\n    type: uri_file\n    path: "+web.URL+"/data/hang.csv\n")
	waitFor(t, "the download to start", 30*time.Second, func() bool {
		lines, err := in.client.Logs(context.Background(), "default", slow.Name, 0)
		for _, l := range lines {
			if strings.Contains(l.Text, "fetching") {
				return true
			}
		}
		return err != nil
	})
	if _, err := in.client.CancelJob(context.Background(), "default", slow.Name); err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, in, slow.Name, 10*time.Second); j.Status != api.JobCanceled {
		t.Errorf("%s: %s (%s), want Canceled", j.Name, j.Status, j.Error)
	}
}

// TestHelloCodeForReal runs azureml-examples' hello-code.yml unchanged with
// the real CLI, which uploads the src/ folder the test provides.
func TestHelloCodeForReal(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	b, err := os.ReadFile(filepath.Join(examples, "jobs/basics/hello-code.yml"))
	if err != nil {
		t.Skipf("example files not available: %v", err)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"hello-code.yml": string(b), "src/hello.py": "print('hello')\n", "src/data/small.txt": "x\n"} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tideBin, "job", "create", "-f", filepath.Join(dir, "hello-code.yml"), "--name", "hello_code", "--stream")
	cmd.Env = append(os.Environ(), "TIDE_SERVER="+in.cfg.AdvertiseURL, "TIDE_TOKEN="+in.srv.AdminToken, "XDG_CONFIG_HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tide job create: %v\n%s", err, out)
	}
	for _, w := range []string{"Uploading code src (2 files", "\nhello.py\n", "\ndata\n", "Job hello_code completed"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestSnapshotUploadRejectsBadArchives(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	put := func(body []byte) error {
		h := sha256.Sum256(body)
		return in.client.PutBlob(ctx, hex.EncodeToString(h[:]), bytes.NewReader(body), int64(len(body)))
	}
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"tar slip", tarGz(t, map[string]string{"../../etc/evil": "x"}), "paths may not leave the folder"},
		{"absolute", tarGz(t, map[string]string{"/etc/evil": "x"}), "absolute paths are not allowed"},
		{"escaping link", tarGz(t, map[string]string{"l@": "../../etc"}), "escapes the folder"},
		{"not an archive", []byte("plain text"), "not a safe tar.gz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := put(tt.body)
			if err == nil || api.ProblemCode(err) != api.CodeBadRequest || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a BadRequest with %q", err, tt.want)
			}
		})
	}
	good := tarGz(t, map[string]string{"a.py": "print(1)"})
	if err := in.client.PutBlob(ctx, strings.Repeat("0", 64), bytes.NewReader(good), int64(len(good))); err == nil || !strings.Contains(err.Error(), "does not match its SHA-256") {
		t.Fatalf("wrong digest: %v", err)
	}
	if err := put(good); err != nil {
		t.Fatal(err)
	}
	// A job that names a snapshot nobody uploaded is refused at submit.
	createCompute(t, in, cluster)
	j := &api.Job{Type: "command", Command: "ls", Code: api.BlobRef(strings.Repeat("1", 64), "")}
	if _, err := in.client.CreateJob(ctx, "default", j); err == nil || !strings.Contains(err.Error(), "was not uploaded") {
		t.Fatalf("job with a missing snapshot: %v", err)
	}
	if err := in.client.Ready(ctx); err != nil {
		t.Fatal(err)
	}
}
