package sweep

import (
	"math"
	"strconv"
	"testing"

	"github.com/tideml/tide/api"
)

// optimise runs a sequential sweep of n trials of s against f and returns
// the best value found.
func optimise(s *api.Job, n int, f func(p map[string]string) float64) (float64, map[string]string) {
	var done []Observation
	best, bestP := math.NaN(), map[string]string(nil)
	for i := range n {
		p := Next(s, i, done, nil)
		v := f(p)
		done = append(done, Observation{Params: p, Value: v})
		if math.IsNaN(best) || better(s.Objective.Goal, v, best) {
			best, bestP = v, p
		}
	}
	return best, bestP
}

func num(p map[string]string, k string) float64 {
	v, _ := strconv.ParseFloat(p[k], 64)
	return v
}

// branin has its minimum 0.397887 at (-π, 12.275), (π, 2.275) and
// (9.42478, 2.475).
func branin(p map[string]string) float64 {
	x1, x2 := num(p, "x1"), num(p, "x2")
	a, b, c, r, s, t := 1.0, 5.1/(4*math.Pi*math.Pi), 5/math.Pi, 6.0, 10.0, 1/(8*math.Pi)
	return a*math.Pow(x2-b*x1*x1+c*x1-r, 2) + s*(1-t)*math.Cos(x1) + s
}

func TestBayesianFindsKnownOptima(t *testing.T) {
	const trials = 30
	for _, seed := range []int64{1, 2, 3} {
		s := parse(t, `type: sweep
trial: {command: "f ${{search_space.x1}} ${{search_space.x2}}"}
search_space:
  x1: uniform(-5, 10)
  x2: uniform(0, 15)
sampling_algorithm: bayesian
objective: {primary_metric: f, goal: minimize}
`)
		s.Sampling.Seed = &seed
		bayes, at := optimise(s, trials, branin)
		s.Sampling.Type = api.SamplingRandom
		random, _ := optimise(s, trials, branin)
		t.Logf("seed %d: Branin after %d trials: bayesian %.4f at %v, random %.4f (optimum 0.3979)", seed, trials, bayes, at, random)
		if bayes > 0.6 || bayes >= random {
			t.Errorf("seed %d: bayesian reached %.4f, random %.4f; want below 0.6 and better than random", seed, bayes, random)
		}
	}
}

func TestBayesianMixedSpace(t *testing.T) {
	// The best is opt=b, k=2, lr near e^-3 (log space), maximizing.
	s := parse(t, `type: sweep
trial: {command: "f ${{search_space.opt}} ${{search_space.k}} ${{search_space.lr}}"}
search_space:
  opt: choice("a", "b", "c")
  k: randint(5)
  lr: loguniform(-7, 0)
sampling_algorithm: bayesian
objective: {primary_metric: acc, goal: maximize}
`)
	f := func(p map[string]string) float64 {
		v := -math.Pow(math.Log(num(p, "lr"))+3, 2) / 4
		v -= math.Abs(num(p, "k") - 2)
		if p["opt"] == "b" {
			v += 1
		}
		return v
	}
	best, at := optimise(s, 30, f)
	if at["opt"] != "b" || at["k"] != "2" || best < 0.9 {
		t.Errorf("best %.4f at %v; want about 1 at opt=b k=2 lr≈0.05", best, at)
	}
}

func TestBayesianAvoidsPending(t *testing.T) {
	s := parse(t, `type: sweep
trial: {command: "f ${{search_space.x}}"}
search_space:
  x: uniform(0, 1)
sampling_algorithm: bayesian
objective: {primary_metric: f, goal: maximize}
`)
	var done []Observation
	for i := range 6 {
		p := Next(s, i, nil, nil)
		done = append(done, Observation{Params: p, Value: -math.Pow(num(p, "x")-0.5, 2)})
	}
	first := Next(s, 6, done, nil)
	second := Next(s, 7, done, []map[string]string{first})
	if d := math.Abs(num(first, "x") - num(second, "x")); d < 0.01 {
		t.Errorf("a trial started beside a running one probes the same point: %v and %v", first, second)
	}
}

// BenchmarkBayesianProposal proposes a trial from the largest history the
// model learns from (bayesWindow completed trials, 4 running).
func BenchmarkBayesianProposal(b *testing.B) {
	s := parse(b, `type: sweep
trial: {command: "f ${{search_space.x1}} ${{search_space.x2}} ${{search_space.c}}"}
search_space:
  x1: uniform(-5, 10)
  x2: loguniform(-3, 3)
  c: choice("a", "b", "c")
sampling_algorithm: bayesian
objective: {primary_metric: f, goal: minimize}
`)
	var done []Observation
	for i := range bayesWindow {
		p := randomPoint(s.SearchSpace, 1, i)
		done = append(done, Observation{Params: p, Value: branin(map[string]string{"x1": p["x1"], "x2": p["x2"]})})
	}
	pending := []map[string]string{done[0].Params, done[1].Params, done[2].Params, done[3].Params}
	for b.Loop() {
		Next(s, bayesWindow, done, pending)
	}
}
