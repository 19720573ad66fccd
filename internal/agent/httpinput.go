package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/archive"
)

// fetchHTTP gives the job an http(s) input, within the server's
// max_data_size. A uri_folder URL ending in .tar.gz or .tgz is unpacked;
// anything else is saved under the URL's file name.
//
// An answer that names its version (a strong ETag, else Last-Modified)
// goes through the node cache, keyed by the URL, that version and the
// input's type: a later job on the node whose request gets the same
// version uses the cached copy, and the body is not read. Answers without
// one are written into dst, uncached (nothing says when they change).
func (j *job) fetchHTTP(ctx context.Context, in api.JobInput, dst string) (placed, error) {
	isFile := in.Type == api.InputURIFile
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.Path, nil)
	if err != nil {
		return placed{}, err
	}
	resp, err := fetchClient.Do(req)
	if err != nil {
		return placed{}, fmt.Errorf("fetching: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return placed{}, fmt.Errorf("fetching: the server answered %s", resp.Status)
	}
	limit := j.a.maxData.Load()
	if limit > 0 && resp.ContentLength > limit {
		return placed{}, fmt.Errorf("%d bytes is more than the server's max_data_size of %d bytes; raise max_data_size or use a datastore", resp.ContentLength, limit)
	}
	u, _ := url.Parse(in.Path)
	name := path.Base(u.Path)
	if name == "/" || name == "." || name == "" {
		name = "data"
	}
	unpack := !isFile && (strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz"))
	write := func(ctx context.Context, dir string) error {
		return writeBody(resp.Body, dir, name, unpack, limit)
	}
	file := ""
	if isFile {
		file = name
	}
	version := httpVersion(resp.Header)
	if version == "" {
		if err := write(ctx, dst); err != nil {
			return placed{}, err
		}
		return placed{path: filepath.Join(dst, file)}, nil
	}
	pl, hit, err := j.fromCache(ctx, in, "http\x00"+in.Path+"\x00"+version+"\x00"+in.Type, dst, file, write)
	if err == nil && hit {
		j.logs.add("tide", fmt.Sprintf("%s: from the node's cache (%s)", redactURL(in.Path), version))
	}
	return pl, err
}

// httpVersion is what an answer says its content's version is: a strong
// ETag, else Last-Modified, else "" (a weak ETag promises the same
// meaning, not the same bytes).
func httpVersion(h http.Header) string {
	if e := h.Get("ETag"); e != "" && !strings.HasPrefix(e, "W/") {
		return "etag " + e
	}
	if lm := h.Get("Last-Modified"); lm != "" {
		return "last-modified " + lm
	}
	return ""
}

// redactURL leaves the query (a SAS token, say) out of a URL for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the URL"
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}

// writeBody writes an http body into the folder dir: unpacked, or as the
// file name; more than limit bytes (0: no limit) is an error.
func writeBody(body io.Reader, dir, name string, unpack bool, limit int64) error {
	if limit > 0 {
		body = io.LimitReader(body, limit+1)
	}
	if unpack {
		if err := archive.Extract(body, dir, limit); err != nil {
			return fmt.Errorf("unpacking: %w", err)
		}
		return nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fetching: %w", err)
	}
	if limit > 0 && n > limit {
		return fmt.Errorf("more than the server's max_data_size of %d bytes; raise max_data_size or use a datastore", limit)
	}
	return nil
}
