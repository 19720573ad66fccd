package sweep

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/tideml/tide/api"
)

// Bayesian sampling: a Gaussian process (Matérn 5/2 kernel over the search
// space mapped to the unit cube, its length scale and noise chosen by
// marginal likelihood) models the primary metric from the finished trials;
// the next trial is the candidate, among many drawn from the search space,
// with the largest expected improvement. Trials still running count as
// observations of the mean ("constant liar"), so trials started together
// do not all probe the same point.

const (
	// bayesInitial trials are drawn at random before the model is used.
	bayesInitial = 5
	// bayesCandidates is how many points the acquisition compares.
	bayesCandidates = 2000
	// bayesWindow is how many of the latest finished trials the model
	// learns from, which bounds its cost on long sweeps.
	bayesWindow = 100
)

// bayesNext proposes trial index of s from the finished trials done and
// the parameters of the trials still running.
func bayesNext(s *api.Job, index int, done []Observation, pending []map[string]string) map[string]string {
	var seed int64
	if s.Sampling.Seed != nil {
		seed = *s.Sampling.Seed
	}
	if len(done) < bayesInitial {
		return randomPoint(s.SearchSpace, seed, index)
	}
	if len(done) > bayesWindow {
		done = done[len(done)-bayesWindow:]
	}
	ns := names(s.SearchSpace)
	enc := encoder{space: s.SearchSpace, names: ns}
	sign := 1.0
	if s.Objective.Goal == api.GoalMinimize {
		sign = -1
	}
	var xs [][]float64
	var ys []float64
	for _, o := range done {
		xs = append(xs, enc.encode(o.Params))
		ys = append(ys, sign*o.Value)
	}
	mean, std := meanStd(ys)
	for i := range ys {
		ys[i] = (ys[i] - mean) / std
	}
	for _, p := range pending {
		xs = append(xs, enc.encode(p))
		ys = append(ys, 0) // the liar: the mean of what was seen
	}
	gp := fitGP(xs, ys)
	best := math.Inf(-1)
	for _, y := range ys[:len(done)] {
		best = max(best, y)
	}
	r := rand.New(rand.NewPCG(uint64(seed), uint64(index)|1<<62))
	var pick map[string]string
	pickEI := -1.0
	for range bayesCandidates {
		c := map[string]string{}
		for _, name := range ns {
			c[name] = Draw(s.SearchSpace[name], r)
		}
		mu, sigma := gp.predict(enc.encode(c))
		if ei := expectedImprovement(mu, sigma, best); ei > pickEI {
			pick, pickEI = c, ei
		}
	}
	return pick
}

// encoder maps parameters to the unit cube: a numeric one by its
// distribution's own scale (log for the log kinds, the normal CDF for the
// normal kinds), a choice as one coordinate per value.
type encoder struct {
	space map[string]api.SearchDist
	names []string
}

func (e encoder) encode(p map[string]string) []float64 {
	var out []float64
	for _, name := range e.names {
		sd, v := e.space[name], p[name]
		if sd.Type == api.DistChoice {
			for _, c := range sd.Values {
				if c == v {
					out = append(out, 1)
				} else {
					out = append(out, 0)
				}
			}
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		out = append(out, unit(sd, x))
	}
	return out
}

// unit is where x lies in sd, from 0 to 1.
func unit(sd api.SearchDist, x float64) float64 {
	logOf := func(x float64) float64 { return math.Log(max(x, 1e-300)) }
	var u float64
	switch sd.Type {
	case api.DistRandint:
		u = (x + 0.5) / float64(*sd.Upper)
	case api.DistUniform, api.DistQuniform:
		u = (x - *sd.MinValue) / (*sd.MaxValue - *sd.MinValue)
	case api.DistLoguniform, api.DistQloguniform:
		u = (logOf(x) - *sd.MinValue) / (*sd.MaxValue - *sd.MinValue)
	case api.DistNormal, api.DistQnormal:
		u = normCDF((x - *sd.Mu) / *sd.Sigma)
	case api.DistLognormal, api.DistQlognormal:
		u = normCDF((logOf(x) - *sd.Mu) / *sd.Sigma)
	}
	return min(max(u, 0), 1)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

func normPDF(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }

func meanStd(ys []float64) (float64, float64) {
	m := 0.0
	for _, y := range ys {
		m += y
	}
	m /= float64(len(ys))
	v := 0.0
	for _, y := range ys {
		v += (y - m) * (y - m)
	}
	s := math.Sqrt(v / float64(len(ys)))
	if s < 1e-12 {
		s = 1
	}
	return m, s
}

// expectedImprovement of a point with posterior mean mu and deviation
// sigma over the best value so far (maximizing).
func expectedImprovement(mu, sigma, best float64) float64 {
	if sigma < 1e-12 {
		return max(mu-best, 0)
	}
	const xi = 0.01 // a little exploration
	z := (mu - best - xi) / sigma
	return (mu-best-xi)*normCDF(z) + sigma*normPDF(z)
}

// gp is a fitted Gaussian process with unit signal variance.
type gp struct {
	xs     [][]float64
	alpha  []float64   // K⁻¹ y
	chol   [][]float64 // lower Cholesky factor of K
	length float64
}

func matern52(a, b []float64, length float64) float64 {
	d := 0.0
	for i := range a {
		d += (a[i] - b[i]) * (a[i] - b[i])
	}
	r := math.Sqrt(5*d) / length
	return (1 + r + r*r/3) * math.Exp(-r)
}

// fitGP fits a GP to (xs, ys), choosing the length scale and noise that
// maximise the marginal likelihood over a small grid.
func fitGP(xs [][]float64, ys []float64) *gp {
	var best *gp
	bestLL := math.Inf(-1)
	for _, length := range []float64{0.05, 0.1, 0.2, 0.35, 0.5, 1, 2} {
		for _, noise := range []float64{1e-4, 1e-2, 0.1} {
			g, ll := fitWith(xs, ys, length, noise)
			if g != nil && ll > bestLL {
				best, bestLL = g, ll
			}
		}
	}
	return best
}

func fitWith(xs [][]float64, ys []float64, length, noise float64) (*gp, float64) {
	n := len(xs)
	k := make([][]float64, n)
	for i := range k {
		k[i] = make([]float64, n)
		for j := range k[i] {
			k[i][j] = matern52(xs[i], xs[j], length)
		}
		k[i][i] += noise
	}
	l, ok := cholesky(k)
	if !ok {
		return nil, 0
	}
	alpha := cholSolve(l, ys)
	ll := 0.0
	for i := range ys {
		ll -= 0.5*ys[i]*alpha[i] + math.Log(l[i][i])
	}
	return &gp{xs: xs, alpha: alpha, chol: l, length: length}, ll
}

// predict returns the posterior mean and standard deviation at x.
func (g *gp) predict(x []float64) (float64, float64) {
	ks := make([]float64, len(g.xs))
	mu := 0.0
	for i, xi := range g.xs {
		ks[i] = matern52(x, xi, g.length)
		mu += ks[i] * g.alpha[i]
	}
	v := forward(g.chol, ks)
	variance := 1.0
	for _, vi := range v {
		variance -= vi * vi
	}
	return mu, math.Sqrt(max(variance, 1e-12))
}

func cholesky(a [][]float64) ([][]float64, bool) {
	n := len(a)
	l := make([][]float64, n)
	for i := range l {
		l[i] = make([]float64, n)
	}
	for i := range n {
		for j := 0; j <= i; j++ {
			sum := a[i][j]
			for k := range j {
				sum -= l[i][k] * l[j][k]
			}
			if i == j {
				if sum <= 0 {
					return nil, false
				}
				l[i][i] = math.Sqrt(sum)
			} else {
				l[i][j] = sum / l[j][j]
			}
		}
	}
	return l, true
}

// forward solves L v = b.
func forward(l [][]float64, b []float64) []float64 {
	v := slices.Clone(b)
	for i := range v {
		for k := range i {
			v[i] -= l[i][k] * v[k]
		}
		v[i] /= l[i][i]
	}
	return v
}

// cholSolve solves L Lᵀ x = b.
func cholSolve(l [][]float64, b []float64) []float64 {
	v := forward(l, b)
	for i := len(v) - 1; i >= 0; i-- {
		for k := i + 1; k < len(v); k++ {
			v[i] -= l[k][i] * v[k]
		}
		v[i] /= l[i][i]
	}
	return v
}
