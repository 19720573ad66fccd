package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/archive"
	"github.com/tideml/tide/internal/spec"
)

// getStream starts a GET of path on the server; the caller closes the body.
func (c *client) getStream(ctx context.Context, p string) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, http.MethodGet, p, nil, "")
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.failover()
		return nil, fmt.Errorf("GET %s: %w", p, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode >= 500 {
			c.failover()
		}
		return nil, fmt.Errorf("GET %s: %w", p, &statusError{Code: resp.StatusCode, Body: string(b)})
	}
	return resp.Body, nil
}

// fetchBlob unpacks a snapshot from the server into dir, retrying while the
// server is unreachable.
func (j *job) fetchBlob(ctx context.Context, digest, dir string) error {
	return j.a.retry(ctx, "fetching snapshot "+digest, func(ctx context.Context) error {
		body, err := j.a.client.getStream(ctx, "/v1/agent/blobs/"+url.PathEscape(digest))
		if err != nil {
			return err
		}
		defer body.Close()
		return archive.Extract(body, dir, j.a.maxData.Load())
	})
}

// prepare runs prepareData with a context that stop cancels.
func (j *job) prepare(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	j.mu.Lock()
	if j.stopKind != stopNone {
		j.mu.Unlock()
		return context.Canceled
	}
	j.cancelPrep = cancel
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.cancelPrep = nil
		j.mu.Unlock()
	}()
	return j.prepareData(ctx)
}

// fetchClient fetches http(s) inputs. It is not the server client: the
// node's token must not go to other hosts. A server that accepts the
// connection but never answers fails the job instead of holding it.
var fetchClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: time.Minute,
}}

// prepareData unpacks the job's code as its working folder and fetches its
// data inputs, binding each input name to its local path in j.as.Inputs.
// An error names the field and the reason; the job then fails with it.
func (j *job) prepareData(ctx context.Context) error {
	if j.as.Code != "" {
		if err := j.fetchCode(ctx); err != nil {
			return fmt.Errorf("code: unpacking the snapshot: %w", err)
		}
	}
	if digest, _, ok := api.ParseBlobRef(j.as.BuildPath); ok {
		// The environment's Docker build context, uploaded by the CLI.
		dir := filepath.Join(j.dir, ".tide", "build-context")
		j.logs.add("tide", "unpacking the environment's build context "+digest[:min(12, len(digest))])
		if err := j.fetchBlob(ctx, digest, dir); err != nil {
			return fmt.Errorf("environment.build.path: unpacking the build context: %w", err)
		}
		j.buildDir = dir
	}
	names := make([]string, 0, len(j.as.Data))
	for name := range j.as.Data {
		names = append(names, name)
	}
	slices.Sort(names)
	bound := map[string]string{}
	var binds []runtime.Bind
	var mounts []string
	for _, name := range names {
		if !safeName(name) {
			return fmt.Errorf("inputs.%s: input names must be plain names", name)
		}
		in := j.as.Data[name]
		if in.Mode == "direct" {
			// Azure's direct: the job reads the data itself, from
			// the URI.
			if _, _, ok := api.ParseBlobRef(in.Path); ok {
				return fmt.Errorf("inputs.%s: direct gives the job the input's URI, and this data was uploaded to tide and has none; use ro_mount or download", name)
			}
			j.logs.add("tide", fmt.Sprintf("inputs.%s: %s (direct: not fetched; the job reads it)", name, in.Path))
			bound[name] = in.Path
			continue
		}
		dst := filepath.Join(j.inputsDir(), name)
		if err := removeTree(dst); err != nil {
			return fmt.Errorf("inputs.%s: clearing %s: %w", name, dst, err)
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("inputs.%s: %w", name, err)
		}
		j.logs.add("tide", fmt.Sprintf("inputs.%s: fetching %s (%s, %s)", name, in.Path, in.Type, in.Mode))
		fetch, stage := in, dst
		if evaluates(in.Mode) {
			// The MLTable's folder, shown or cached as for ro_mount,
			// is evaluated; the job gets the files it names.
			fetch.Mode, stage = "ro_mount", filepath.Join(j.inputsDir(), "."+name+".mltable")
			if err := os.MkdirAll(stage, 0o755); err != nil {
				return fmt.Errorf("inputs.%s: %w", name, err)
			}
		}
		pl, err := j.fetchInput(ctx, fetch, stage)
		if err != nil {
			return fmt.Errorf("inputs.%s: %s: %w", name, in.Path, err)
		}
		if err := checkMLTable(in, pl.source()); err != nil {
			return fmt.Errorf("inputs.%s: %s: %w", name, in.Path, err)
		}
		if evaluates(in.Mode) {
			n, copied, err := j.deliverEvaluated(in, pl.source(), dst)
			if err != nil {
				return fmt.Errorf("inputs.%s: %s: %w", name, in.Path, err)
			}
			j.logs.add("tide", fmt.Sprintf("inputs.%s: the MLTable names %d files, given at %s (%d copied, %d linked to the node's cache)", name, n, dst, copied, n-copied))
			pl = placed{path: dst}
		}
		switch {
		case pl.bind != nil:
			j.logs.add("tide", fmt.Sprintf("inputs.%s: %s shown read-only at %s, not copied", name, pl.bind.Source, pl.bind.Target))
			binds = append(binds, *pl.bind)
		case in.Mode == "download" || in.Mode == "eval_download":
			mounts = append(mounts, dst)
		case j.bindsReadOnly():
			// A fetched copy, bound read-only like a local source.
			binds = append(binds, runtime.Bind{Source: dst, Target: dst})
		default:
			// The runtime cannot bind: a copy without write
			// permission stops mistakes, not a job running as root.
			if err := readOnlyTree(dst); err != nil {
				return fmt.Errorf("inputs.%s: making it read-only: %w", name, err)
			}
			mounts = append(mounts, dst)
		}
		bound[name] = pl.path
	}
	j.inputBinds, j.inputMounts = binds, mounts
	if len(bound) > 0 {
		j.mu.Lock()
		if j.as.Inputs == nil {
			j.as.Inputs = map[string]string{}
		}
		for k, v := range bound {
			j.as.Inputs[k] = v
		}
		j.asJSON = nil
		j.mu.Unlock()
	}
	return nil
}

// checkMLTable refuses an mltable input whose folder holds no MLTable file
// (Azure ML's table definition), saying what the folder holds.
func checkMLTable(in api.JobInput, dir string) error {
	if in.Type != api.InputMLTable {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "MLTable")); err == nil {
		return nil
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for i, e := range entries {
		if i == 5 {
			names = append(names, "...")
			break
		}
		names = append(names, e.Name())
	}
	return fmt.Errorf("an mltable input is a folder with an MLTable file, and this one holds none (it has: %s); point path at the folder that holds MLTable, or use type: uri_folder", strings.Join(names, ", "))
}

// placed is where an input is for the job: path is what
// ${{inputs.NAME}} binds to; bind, when set, shows a file or folder of
// the node read-only at path instead of a copy.
type placed struct {
	path string
	bind *runtime.Bind
}

// source is the file or folder that holds the input's data on this node.
func (p placed) source() string {
	if p.bind != nil {
		return p.bind.Source
	}
	return p.path
}

// bindsReadOnly reports whether the node's runtime can bind ro_mount
// inputs read-only instead of copying them.
func (j *job) bindsReadOnly() bool {
	b, ok := j.a.cfg.Runtime.(runtime.ReadOnlyBinder)
	return ok && b.BindsReadOnly()
}

// fetchInput puts one data input into dst, or for a ro_mount of data
// already on the node binds it there, and says where the job sees it: dst
// for a folder, the file inside dst for a uri_file.
func (j *job) fetchInput(ctx context.Context, in api.JobInput, dst string) (placed, error) {
	kind, problem := spec.ClassifyDataPath(in.Path)
	if problem != "" {
		return placed{}, errors.New(problem)
	}
	switch kind {
	case spec.PathBlob:
		return j.fetchSnapshot(ctx, in, dst)
	case spec.PathFile:
		u, _ := url.Parse(in.Path)
		return j.placeLocal(u.Path, dst, in)
	case spec.PathDatastore:
		return j.fetchDatastore(ctx, in, dst)
	case spec.PathHTTP:
		return j.fetchHTTP(ctx, in, dst)
	}
	return placed{}, fmt.Errorf("the node cannot fetch %s paths; was the job submitted with 'tide job create -f'?", kind)
}

// placeLocal gives the job src, a file or folder on this node: bound
// read-only for ro_mount where the runtime can, else copied into dst.
func (j *job) placeLocal(src, dst string, in api.JobInput) (placed, error) {
	isFile := in.Type == api.InputURIFile
	if err := checkKind(src, isFile); err != nil {
		return placed{}, err
	}
	if in.Mode != "ro_mount" || !j.bindsReadOnly() {
		p, err := copyLocal(src, dst, isFile)
		return placed{path: p}, err
	}
	target := dst
	if isFile {
		// A file is bound onto an empty file of the same name.
		target = filepath.Join(dst, filepath.Base(src))
		if err := os.WriteFile(target, nil, 0o444); err != nil {
			return placed{}, err
		}
	}
	return placed{path: target, bind: &runtime.Bind{Source: src, Target: target}}, nil
}

// checkKind refuses a src that is not what the input's type says.
func checkKind(src string, isFile bool) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("on node: %w", err)
	}
	switch {
	case isFile && info.IsDir():
		return fmt.Errorf("%s is a folder; use type: uri_folder", src)
	case !isFile && !info.IsDir():
		return fmt.Errorf("%s is a file; use type: uri_file", src)
	}
	return nil
}

// copyLocal copies a file or folder on this node into dst.
func copyLocal(src, dst string, isFile bool) (string, error) {
	if err := checkKind(src, isFile); err != nil {
		return "", err
	}
	if isFile {
		out := filepath.Join(dst, filepath.Base(src))
		return out, copyFile(src, out)
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copying %s: %w", src, err)
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// readOnlyTree removes write permission from everything under dir,
// folders last so the walk can still list them.
func readOnlyTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o222)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return err
		}
	}
	return nil
}

// removeTree deletes dir, making read-only folders writable first (an
// earlier run of the same attempt may have left a ro_mount copy).
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
