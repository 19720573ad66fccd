package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// errOutputWork stops a pipeline's advance that needs output work not
// done yet (outputWork).
var errOutputWork = errors.New("a pipeline's advance needs its steps' outputs packed or copied first")

// outputWork is what advancing a pipeline needs done with its steps'
// output files: an output packed as a snapshot for the next step
// (StepOutputs.PackOutput), one copied into the pipeline's own outputs
// (CopyOutput). Both read and write files, possibly large ones, or blobs
// in Azure; inside the advance's transaction they would hold the store's
// one writer (SQLite's, and each server's on PostgreSQL) for as long. So
// an advance that needs work not done yet records it and stops with
// errOutputWork, inUpdateWithOutputs does the work outside the
// transaction, and the advance runs again from the start, finding it
// done. The work is kept for one advance only: a step's outputs do not
// change once it completed.
type outputWork struct {
	// uploaded holds the snapshots packed, which checkSnapshot need not
	// ask the blob store about (lookUpSnapshots).
	uploaded map[string]bool
	packs    map[packKey]packed
	copies   map[copyKey]error
	todo     []func(context.Context, StepOutputs) // what the last run needed
}

type packKey struct {
	job, output string
	file        bool
}

type packed struct {
	ref string
	err error
}

type copyKey struct{ job, output, toJob, to string }

// pack returns job's output packed, or errOutputWork after recording the
// work.
func (w *outputWork) pack(job *api.Job, output string, file bool) (string, error) {
	k := packKey{job.Name, output, file}
	if p, ok := w.packs[k]; ok {
		return p.ref, p.err
	}
	w.todo = append(w.todo, func(ctx context.Context, o StepOutputs) {
		ref, err := o.PackOutput(ctx, job, output, file)
		w.packs[k] = packed{ref, err}
		if digest, _, ok := api.ParseBlobRef(ref); ok && err == nil {
			w.uploaded[digest] = true
		}
	})
	return "", errOutputWork
}

// copy returns the error of copying job's output into toJob's output to,
// or errOutputWork after recording the work.
func (w *outputWork) copy(job *api.Job, output, toJob, to string) error {
	k := copyKey{job.Name, output, toJob, to}
	if err, ok := w.copies[k]; ok {
		return err
	}
	w.todo = append(w.todo, func(ctx context.Context, o StepOutputs) {
		w.copies[k] = o.CopyOutput(ctx, job, output, toJob, to)
	})
	return errOutputWork
}

// inUpdateWithOutputs runs fn in a write transaction, as Store.Update
// does, doing the output work fn stops for (errOutputWork) between its
// runs, outside any transaction. fn's context says which snapshots were
// packed.
func (s *Service) inUpdateWithOutputs(ctx context.Context, fn func(ctx context.Context, tx store.Tx, w *outputWork) error) error {
	w := &outputWork{uploaded: map[string]bool{}, packs: map[packKey]packed{}, copies: map[copyKey]error{}}
	fctx := context.WithValue(ctx, uploadedKey{}, w.uploaded)
	for {
		w.todo = nil
		err := s.Store.Update(ctx, func(tx store.Tx) error {
			w.todo = nil
			return fn(fctx, tx, w)
		})
		if !errors.Is(err, errOutputWork) {
			return err
		}
		if len(w.todo) == 0 {
			return fmt.Errorf("advancing a pipeline: %w, but named none", errOutputWork)
		}
		if s.Outputs == nil {
			return errors.New("advancing a pipeline: the server hands no step outputs on (no StepOutputs)")
		}
		for _, do := range w.todo {
			do(ctx, s.Outputs)
		}
	}
}
