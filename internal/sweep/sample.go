// Package sweep holds the decisions of sweep jobs, apart from their
// effects: the parameters of each trial (Next: random, grid or Bayesian
// sampling of the search space), the command job a trial runs as
// (TrialJob), which trials to start or stop and when the sweep ends
// (Decide), and how trials rank (Rank). The service applies them.
package sweep

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
)

// Observation is a finished trial: its parameters and the value of the
// primary metric it ended with.
type Observation struct {
	Params map[string]string
	Value  float64
}

// Next returns the parameters of trial index (from 0) of sweep s. Random
// sampling draws them from s's seed and the index alone, so a trial's
// parameters do not depend on when it starts; grid sampling takes the
// index-th point of the grid; Bayesian sampling proposes the point the
// finished trials (done, in start order) make most promising, away from
// the trials still running (pending).
func Next(s *api.Job, index int, done []Observation, pending []map[string]string) map[string]string {
	switch s.Sampling.Type {
	case api.SamplingGrid:
		return gridPoint(s.SearchSpace, index)
	case api.SamplingBayesian:
		return bayesNext(s, index, done, pending)
	}
	var seed int64
	if s.Sampling.Seed != nil {
		seed = *s.Sampling.Seed
	}
	return randomPoint(s.SearchSpace, seed, index)
}

func names(space map[string]api.SearchDist) []string {
	out := make([]string, 0, len(space))
	for k := range space {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func randomPoint(space map[string]api.SearchDist, seed int64, index int) map[string]string {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(index)))
	out := map[string]string{}
	for _, name := range names(space) {
		out[name] = Draw(space[name], r)
	}
	return out
}

// Draw samples one value of sd, formatted as a trial's command gets it.
func Draw(sd api.SearchDist, r *rand.Rand) string {
	switch sd.Type {
	case api.DistChoice:
		return sd.Values[r.IntN(len(sd.Values))]
	case api.DistRandint:
		return strconv.Itoa(r.IntN(*sd.Upper))
	}
	return Format(sd, FromUnit(sd, r.Float64(), r.NormFloat64()))
}

// FromUnit maps a uniform u in [0,1) (for the uniform kinds) or a standard
// normal z (for the normal kinds) to a value of sd, before rounding to q.
func FromUnit(sd api.SearchDist, u, z float64) float64 {
	switch sd.Type {
	case api.DistUniform, api.DistQuniform:
		return *sd.MinValue + u*(*sd.MaxValue-*sd.MinValue)
	case api.DistLoguniform, api.DistQloguniform:
		return math.Exp(*sd.MinValue + u*(*sd.MaxValue-*sd.MinValue))
	case api.DistNormal, api.DistQnormal:
		return *sd.Mu + z**sd.Sigma
	case api.DistLognormal, api.DistQlognormal:
		return math.Exp(*sd.Mu + z**sd.Sigma)
	}
	return math.NaN()
}

// Format rounds a value of a numeric distribution to its q (Azure's
// round(x / q) * q) and writes it as the trial's command gets it: whole
// numbers for whole q, else as many decimals as q has; the shortest exact
// form for the continuous kinds.
func Format(sd api.SearchDist, x float64) string {
	if sd.Q == nil {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	q := *sd.Q
	v := math.Round(x/q) * q
	dec := 0
	if s := strconv.FormatFloat(q, 'f', -1, 64); strings.Contains(s, ".") {
		dec = len(s) - strings.Index(s, ".") - 1
	}
	if v == 0 {
		v = 0 // no "-0"
	}
	out := strconv.FormatFloat(v, 'f', dec, 64)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// gridPoint is point index of the grid over space's parameters (sorted by
// name, the last varying fastest); nil past the grid's end.
func gridPoint(space map[string]api.SearchDist, index int) map[string]string {
	ns := names(space)
	out := map[string]string{}
	for i := len(ns) - 1; i >= 0; i-- {
		sd := space[ns[i]]
		vals := sd.Values
		if sd.Type == api.DistRandint {
			vals = make([]string, *sd.Upper)
			for k := range vals {
				vals[k] = strconv.Itoa(k)
			}
		}
		out[ns[i]] = vals[index%len(vals)]
		index /= len(vals)
	}
	if index > 0 {
		return nil
	}
	return out
}
