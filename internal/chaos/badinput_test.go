package chaos

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tideml/tide/api"
)

// TestBadInput sends the server input a careless or hostile client could:
// names of 300 characters, with ../, unicode or shell metacharacters;
// environment variable names that are not identifiers; huge and negative
// numbers; invalid UTF-8; a tar bomb as a code snapshot. Each is refused
// with a 4xx naming the field or the limit, nothing is created, and the
// server is healthy afterwards.
func TestBadInput(t *testing.T) {
	s := newServer(t, options{maxDataSize: "8m"})
	cc, err := api.LoadClientConfig(filepath.Join(s.dir, "client.json"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, contentType string, body []byte) (int, string) {
		req, err := http.NewRequest(method, "http://"+s.addr+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+cc.Token)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const ws = "/v1/workspaces/default"
	s.createCompute("name: good\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\n")

	badNames := map[string]string{
		"300 characters":     strings.Repeat("a", 300),
		"dot dot slash":      "../etc",
		"unicode":            "clüster-名前",
		"shell metachars":    "a;rm -rf ~",
		"command subst":      "$(id)",
		"space and quote":    `a b"c`,
		"leading dash":       "-rf",
		"nul byte":           "a\x00b",
		"newline":            "a\nb",
		"backtick and pipes": "`id`|cat",
	}
	type tc struct {
		name, method, path, body string
		want                     []string // the answer names these
	}
	var cases []tc
	for what, n := range badNames {
		q, _ := json.Marshal(n)
		cases = append(cases,
			tc{"compute name " + what, "PUT", ws + "/computes/" + url.PathEscape(n), fmt.Sprintf(`{"name": %s, "type": "amlcompute", "size": "Standard_DS1_v2"}`, q), []string{"name"}},
			tc{"job name " + what, "POST", ws + "/jobs", fmt.Sprintf(`{"name": %s, "command": "echo hi", "compute": "good"}`, q), []string{"name"}},
			tc{"datastore name " + what, "PUT", ws + "/datastores/" + url.PathEscape(n), fmt.Sprintf(`{"name": %s, "type": "local", "path": "/tmp"}`, q), []string{"name"}},
		)
	}
	for _, env := range []string{"1BAD", "A-B", "A B", "A=B", "", "ÄÖ", "$(id)"} {
		q, _ := json.Marshal(env)
		cases = append(cases, tc{"environment variable " + fmt.Sprintf("%q", env), "POST", ws + "/jobs",
			fmt.Sprintf(`{"command": "echo hi", "compute": "good", "environment_variables": {%s: "x"}}`, q), []string{"environment_variables"}})
	}
	cases = append(cases,
		tc{"max_instances 1e12", "PUT", ws + "/computes/huge", "name: huge\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1e12\n", []string{"max_instances"}},
		tc{"max_instances -1", "PUT", ws + "/computes/neg", "name: neg\ntype: amlcompute\nsize: Standard_DS1_v2\nmax_instances: -1\n", []string{"max_instances"}},
		tc{"idle time 1e30", "PUT", ws + "/computes/idle", "name: idle\ntype: amlcompute\nsize: Standard_DS1_v2\nidle_time_before_scale_down: 1e30\n", []string{"idle_time_before_scale_down"}},
		tc{"timeout -1", "POST", ws + "/jobs", "command: echo hi\ncompute: good\nlimits:\n  timeout: -1\n", []string{"limits.timeout"}},
		tc{"timeout 1e300", "POST", ws + "/jobs", "command: echo hi\ncompute: good\nlimits:\n  timeout: 1e300\n", []string{"limits.timeout"}},
		tc{"instance_count 1e12", "POST", ws + "/jobs", "command: echo hi\ncompute: good\nresources:\n  instance_count: 1000000000000\n", []string{"instance_count"}},
		tc{"invalid UTF-8 in a compute", "PUT", ws + "/computes/utf", "name: utf\ntype: amlcompute\nsize: Standard_DS1_v2\ndescription: \"\xff\xfe\"\n", []string{"UTF-8"}},
		tc{"invalid UTF-8 in a job", "POST", ws + "/jobs", "command: \"echo \xc3\x28\"\ncompute: good\n", []string{"UTF-8"}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := call(c.method, c.path, "application/yaml", []byte(c.body))
			if code < 400 || code >= 500 {
				t.Fatalf("%s %s: %d %s; want a 4xx", c.method, c.path, code, body)
			}
			for _, w := range c.want {
				if !strings.Contains(body, w) {
					t.Errorf("the answer does not name %q: %d %s", w, code, body)
				}
			}
		})
	}

	// A tar bomb: 64 MiB of zeros, a few KiB compressed, against an 8 MiB
	// limit.
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	const size = 64 << 20
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	gz.Close()
	sum := sha256.Sum256(buf.Bytes())
	digest := hex.EncodeToString(sum[:])
	code, body := call("PUT", "/v1/blobs/"+digest, "application/gzip", buf.Bytes())
	if code != 413 || !strings.Contains(body, "max_data_size") {
		t.Errorf("a tar bomb (%d bytes compressed, %d expanded): %d %s; want 413 naming max_data_size", buf.Len(), size, code, body)
	}
	if code, _ := call("HEAD", "/v1/blobs/"+digest, "", nil); code != 404 {
		t.Errorf("the tar bomb is stored: HEAD %d", code)
	}

	// Nothing was created, and the server is healthy.
	cs, err := s.client.Computes(t.Context(), "default")
	if err != nil || len(cs) != 1 {
		t.Errorf("computes after bad input: %d, %v; want only the good one", len(cs), err)
	}
	js, err := s.client.Jobs(t.Context(), "default", api.JobFilter{})
	if err != nil || len(js) != 0 {
		t.Errorf("jobs after bad input: %d, %v; want none", len(js), err)
	}
	s.submit("name: still-fine\ncompute: good\ncommand: echo fine\n")
	waitFor(t, "a job after the bad input", 120e9, func() bool {
		j, err := s.client.Job(t.Context(), "default", "still-fine")
		return err == nil && j.Status == api.JobCompleted
	})
	record(row{scenario: fmt.Sprintf("bad input (%d requests refused)", len(cases)+1), jobs: 1, took: "-"})
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
