package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// readSpecFile reads a -f argument; "-" is standard input.
func (r *run) readSpecFile(file string) ([]byte, error) {
	if file == "" {
		return nil, usagef("-f/--file: required; name the YAML file to create from")
	}
	if file == "-" {
		b, err := io.ReadAll(io.LimitReader(r.app.Stdin, api.MaxRequestBody+1))
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		if len(b) > api.MaxRequestBody {
			return nil, usagef("-f -: standard input holds more than %s, the most tide reads (the server's request limit)", bytesize(api.MaxRequestBody))
		}
		return b, nil
	}
	// The size first: a huge file is refused before it is read.
	if info, err := os.Stat(file); err == nil && info.Size() > api.MaxRequestBody {
		return nil, usagef("-f %s: the file is %s; tide reads files of at most %s (the server's request limit); is it the right file?",
			file, bytesize(info.Size()), bytesize(api.MaxRequestBody))
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("-f %s: no such file", file)
	}
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("-f %s: %w", file, err)}
	}
	return b, nil
}

// nameSet turns --name into a --set, so the spec package validates it
// like a name written in the file.
func nameSet(name string, sets []string) []string {
	if name == "" {
		return sets
	}
	return append(append([]string(nil), sets...), "name="+name)
}

// parseCompute parses and validates a compute file locally, so mistakes are
// reported with the file's line numbers before anything is sent.
func parseCompute(file string, data []byte, sets []string) (*api.Compute, error) {
	return spec.ParseCompute(file, data, sets)
}

// parseJob parses and validates a command job file locally. A relative
// environment.build.path is made absolute from the file's folder, as Azure
// ML reads it, because the node builds it from there.
func parseJob(file string, data []byte, sets []string) (*api.Job, error) {
	j, err := spec.ParseJob(file, data, sets)
	if err != nil {
		return nil, err
	}
	switch {
	case j.Type == api.JobTypePipeline:
		return j, nil // preparePipeline reads the steps' files
	case j.Type == api.JobTypeSweep && j.Trial.Component != nil:
		return j, nil // prepareSweep reads the component
	}
	envOf := j
	if j.Type == api.JobTypeSweep {
		envOf = j.Trial
	}
	if envOf.Environment, err = localEnvironment(file, envOf.Environment); err != nil {
		return nil, err
	}
	if err := spec.ValidateJob(j); err != nil {
		return nil, err
	}
	return j, nil
}

// localEnvironment reads environment: file:PATH and makes a relative
// build.path absolute, both relative to the file that names them, as Azure
// ML reads them (the node builds from that folder).
func localEnvironment(file string, e *api.JobEnvironment) (*api.JobEnvironment, error) {
	if e == nil {
		return nil, nil
	}
	if strings.HasPrefix(e.Ref, "file:") {
		return fileEnvironment(file, e.Ref)
	}
	if e.Build != nil && !filepath.IsAbs(e.Build.Path) {
		if abs, err := filepath.Abs(filepath.Join(fileBase(file), e.Build.Path)); err == nil {
			e.Build.Path = abs
		}
	}
	return e, nil
}

// isValidation reports whether err is a local validation error of a file.
func isValidation(err error) bool {
	return spec.AsErrors(err) != nil
}

// fileEnvironment reads environment: file:PATH (relative to the job file,
// as Azure ML reads it) into the inline environment the job carries.
func fileEnvironment(jobFile, ref string) (*api.JobEnvironment, error) {
	p := strings.TrimPrefix(ref, "file:")
	if !filepath.IsAbs(p) && jobFile != "-" {
		p = filepath.Join(filepath.Dir(jobFile), p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, usagef("environment: %s: %v (paths are relative to the job file)", ref, err)
	}
	env, condaPath, err := spec.ParseEnvironment(p, data, nil)
	if err != nil {
		return nil, err
	}
	if env.Tide != nil {
		return nil, usagef("environment: %s has a tide block, which a job cannot carry inline yet; register it with 'tide environment create -f %s' and name it as azureml:%s@latest", ref, p, env.Name)
	}
	out := &api.JobEnvironment{Image: env.Image, CondaFile: env.CondaFile}
	if condaPath != "" {
		if out.CondaFile, err = readCondaFile(p, condaPath); err != nil {
			return nil, err
		}
	}
	return out, nil
}
