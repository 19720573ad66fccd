package service

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// TestOutputWorkOutsideTheWriter: a pipeline's step outputs are packed for
// the next step, and copied into the pipeline's own outputs, outside any
// write transaction (they read and write files, possibly large, and the
// transaction holds the store's one writer); the next step gets the
// packed reference, and the pipeline completes.
func TestOutputWorkOutsideTheWriter(t *testing.T) {
	ctx := t.Context()
	st := seedCPU(t)
	w := &writerWatch{Store: st}
	o := &watchedOutputs{writer: w}
	s := &Service{Store: w, Catalog: catalog.Default(), Outputs: o}
	j, err := spec.ParseJob("p.yml", []byte(`type: pipeline
settings:
  default_compute: azureml:cpu
outputs:
  final:
    type: uri_folder
jobs:
  first:
    command: "true"
    outputs:
      out:
        type: uri_folder
  use:
    command: ls ${{inputs.x}}
    inputs:
      x: ${{parent.jobs.first.outputs.out}}
    outputs:
      result: ${{parent.outputs.final}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.SubmitJob(ctx, "default", j)
	if err != nil {
		t.Fatal(err)
	}
	// complete ends step's job and advances the pipeline; it returns the
	// pipeline.
	complete := func(step string) *api.Job {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			p, err := tx.GetJob(ctx, "default", p.Name)
			if err != nil {
				return err
			}
			for _, s := range p.Steps {
				if s.Name == step {
					c, err := tx.GetJob(ctx, "default", s.Job)
					if err != nil {
						return err
					}
					c.Status = api.JobCompleted
					return tx.PutJob(ctx, c, "")
				}
			}
			t.Fatalf("pipeline has no step %s started: %+v", step, p.Steps)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AdvanceParent(ctx, "default", p.Name); err != nil {
			t.Fatal(err)
		}
		var got *api.Job
		if err := st.View(ctx, func(tx store.Tx) error { got, err = tx.GetJob(ctx, "default", p.Name); return err }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := complete("first")
	var use *api.Job
	if err := st.View(ctx, func(tx store.Tx) error {
		use, err = tx.GetJob(ctx, "default", got.Steps[1].Job)
		return err
	}); err != nil {
		t.Fatalf("step use was not started: %+v (%v)", got.Steps, err)
	}
	if in := use.Inputs["x"]; in.Path != api.BlobRef("packed", "") {
		t.Errorf("step use's input x: %+v, want the packed output", in)
	}
	if got := complete("use"); got.Status != api.JobCompleted {
		t.Errorf("pipeline %s (%s), want Completed", got.Status, got.Error)
	}
	if o.packs.Load() != 1 || o.copies.Load() != 1 || o.inside.Load() != 0 {
		t.Errorf("%d packs and %d copies, %d of them inside a write transaction; want 1, 1 and 0", o.packs.Load(), o.copies.Load(), o.inside.Load())
	}
}

// watchedOutputs packs every output as the snapshot "packed" and counts
// its calls, and those made while writer writes.
type watchedOutputs struct {
	writer                *writerWatch
	packs, copies, inside atomic.Int64
}

func (o *watchedOutputs) PackOutput(ctx context.Context, job *api.Job, output string, file bool) (string, error) {
	o.packs.Add(1)
	if o.writer.writing.Load() {
		o.inside.Add(1)
	}
	return api.BlobRef("packed", ""), nil
}

func (o *watchedOutputs) CopyOutput(ctx context.Context, job *api.Job, output, toJob, to string) error {
	o.copies.Add(1)
	if o.writer.writing.Load() {
		o.inside.Add(1)
	}
	return nil
}
