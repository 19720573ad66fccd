package cli

import (
	"context"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// preparePipeline reads the component files a pipeline's steps name,
// resolves environment files, and uploads code folders and local data, all
// relative to the file that names them (the pipeline's or the
// component's), as Azure ML reads them. It validates the result.
func (r *run) preparePipeline(ctx context.Context, cl *api.Client, file string, j *api.Job) error {
	base := fileBase(file)
	if err := r.uploadInputs(ctx, cl, base, "inputs.", j.Inputs); err != nil {
		return err
	}
	for _, name := range sortedKeys(j.Jobs) {
		s, field := j.Jobs[name], "jobs."+name
		if s == nil {
			continue
		}
		switch c := s.Component; {
		case c != nil && c.Ref != "":
			if _, ok := spec.ComponentFile(c.Ref); ok {
				comp, err := r.readComponentFile(ctx, cl, file, field+".component", c.Ref)
				if err != nil {
					return err
				}
				s.Component = comp
			}
		case c != nil:
			if err := r.prepareComponent(ctx, cl, file, field+".component.", c); err != nil {
				return err
			}
		}
		var err error
		if s.Environment, err = localEnvironment(file, s.Environment); err != nil {
			return err
		}
		if s.Code, err = r.uploadCode(ctx, cl, base, field+".code", s.Code); err != nil {
			return err
		}
		if err := r.uploadInputs(ctx, cl, base, field+".inputs.", s.Inputs); err != nil {
			return err
		}
	}
	return spec.ValidateJob(j)
}
