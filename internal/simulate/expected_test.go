package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// paramDraws is how many values of its random source each generator
// takes for its parameters (rates, hours, cron or not) before it draws
// jobs; a draw of a shape with those parameters takes them from the
// seed's source and the rest from another.
var paramDraws = map[string]int{"poisson": 1, "diurnal": 2, "bursty-batch": 2, "heavy-tail": 1, "multi-gpu": 1, "sparse": 1, "daily-batch": 1}

// splitSource gives the first k values from params and the rest from draws.
type splitSource struct {
	params, draws rand.Source
	k             int
}

func (s *splitSource) Uint64() uint64 {
	if s.k > 0 {
		s.k--
		return s.params.Uint64()
	}
	return s.draws.Uint64()
}

// genDraw returns draw d of shape sh with seed's parameters: the same
// rates as genTrace(sh, seed, days), other arrivals and run times (daily-batch
// also draws its batch's minute and size anew).
func genDraw(sh shape, seed, d uint64, days int) *Trace {
	src := &splitSource{rand.NewPCG(seed, uint64(len(sh.name))), rand.NewPCG(seed, 1<<32+d), paramDraws[sh.name]}
	jobs := sh.gen(rand.New(src), days)
	slices.SortStableFunc(jobs, func(a, b Job) int { return int(a.Submit - b.Submit) })
	return &Trace{File: sh.name, Jobs: jobs, Start: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
}

// TestGenDrawKeepsParameters: with draws from the seed's own source, a
// draw is the seed's trace; so the split takes exactly the parameters.
func TestGenDrawKeepsParameters(t *testing.T) {
	for _, sh := range shapes {
		pcg := rand.NewPCG(1, uint64(len(sh.name)))
		same := sh.gen(rand.New(&splitSource{pcg, pcg, paramDraws[sh.name]}), 2)
		slices.SortStableFunc(same, func(a, b Job) int { return int(a.Submit - b.Submit) })
		if !slices.Equal(same, genTrace(sh, 1, 2).Jobs) {
			t.Errorf("%s: a split source over one source changes the trace", sh.name)
		}
		if slices.Equal(genDraw(sh, 1, 1, 2).Jobs, genDraw(sh, 1, 2, 2).Jobs) {
			t.Errorf("%s: draws 1 and 2 are the same trace", sh.name)
		}
	}
}

// TestExpectedFrontier measures what the target of issue 23 asks in
// expectation rather than on one trace: for each shape and parameter
// seed, TIDE_GEN_DRAWS traces with the seed's rates and fresh arrivals are
// replayed, and the fixed idle times' and the adaptive policy's node-hours
// and mean waits are averaged over the draws. It prints, on those mean
// points, how far fixed 120 s and the adaptive policy lie from the
// envelope and the curve of the mean fixed points, beside how far fixed
// 120 s lies above each draw's own envelope on average: a gap that is
// there on each draw and gone on the mean is sampling noise, which no
// policy that does not know the future can exploit. For sparse (Poisson
// arrivals, mostly one node at a time) it also prints how far the mean
// fixed points of 0-600 s lie from one straight line, and the slope of
// the mean points below and above 600 s. Opt-in (it replays 61-121 settings on
// every draw); the seeds default to the training seeds, never the test
// seeds. TIDE_GEN_EACH=1 prints each draw's result too.
// docs/simulate-results.md ("Why sparse cannot be won") reports it.
func TestExpectedFrontier(t *testing.T) {
	draws := 0
	fmt.Sscan(os.Getenv("TIDE_GEN_DRAWS"), &draws)
	if draws == 0 {
		t.Skip("set TIDE_GEN_DRAWS (e.g. 20) to run the study")
	}
	days, step := 7, 60
	fmt.Sscan(os.Getenv("TIDE_GEN_DAYS"), &days)
	fmt.Sscan(os.Getenv("TIDE_GEN_STEP"), &step)
	seeds := genSeeds(t, trainSeeds)
	for _, s := range seeds {
		if slices.Contains(testSeeds, s) {
			t.Fatalf("seed %d is a test seed: the study must not look at the test seeds' parameters", s)
		}
	}
	for _, sh := range shapes {
		if only := os.Getenv("TIDE_GEN_SHAPES"); only != "" && !slices.Contains(strings.Split(only, ","), sh.name) {
			continue
		}
		for _, seed := range seeds {
			var mean []fixedPoint
			var meanAd fixedPoint
			var own, sq120 float64
			var metEnv, metCurve, jobs int
			for d := uint64(1); d <= uint64(draws); d++ {
				tr := genDraw(sh, seed, d, days)
				pts, ad := replayAll(t, tr, step)
				g := judgePoints(fmt.Sprintf("%s/%d draw %d", sh.name, seed, d), pts, ad, len(tr.Jobs))
				if os.Getenv("TIDE_GEN_EACH") != "" {
					t.Log(g)
				}
				own += g.fixed120.nodeHours/g.frontier120 - 1
				sq120 += g.fixed120.nodeHours * g.fixed120.nodeHours
				if g.dominates && g.onOrBelow {
					metEnv++
				}
				if g.dominates && g.onOrBelowCurve {
					metCurve++
				}
				jobs += len(tr.Jobs)
				if mean == nil {
					mean = make([]fixedPoint, len(pts))
				}
				for i, p := range pts {
					mean[i].idle = p.idle
					mean[i].nodeHours += p.nodeHours / float64(draws)
					mean[i].meanWait += p.meanWait / float64(draws)
				}
				meanAd.nodeHours += ad.nodeHours / float64(draws)
				meanAd.meanWait += ad.meanWait / float64(draws)
			}
			g := judgePoints("", mean, meanAd, jobs/draws)
			// The standard error of fixed 120 s's mean node-hours.
			se := math.Sqrt(max(0, sq120/float64(draws)-g.fixed120.nodeHours*g.fixed120.nodeHours) / float64(draws-1))
			line := ""
			if sh.name == "sparse" {
				line = fmt.Sprintf(" | mean points of 0-600 s off one line by at most %.2f %%, slope %.3f node-h per s of mean wait from 0 to 600 s, %.3f from 600 to 3600 s", 100*lineResidual(mean[:600/step+1]), slope(mean, 0, 600), slope(mean, 600, 3600))
			}
			t.Logf("%s/%d, %d draws of ~%d jobs: mean fixed 120 s %.1f node-h (se %.2f %%) %.1f s, %+.2f %% from the envelope of the means, %+.2f %% from their curve; each draw's own: %+.2f %% on average | mean adaptive %+.2f %% node-h %+.1f s against 120 s, %+.2f %% from the envelope, %+.2f %% from the curve | draws meeting the target: %d (envelope), %d (curve)%s",
				sh.name, seed, draws, jobs/draws, g.fixed120.nodeHours, 100*se/g.fixed120.nodeHours, g.fixed120.meanWait,
				100*(g.fixed120.nodeHours/g.frontier120-1), 100*(g.fixed120.nodeHours/g.curve120-1), 100*own/float64(draws),
				100*(meanAd.nodeHours/g.fixed120.nodeHours-1), meanAd.meanWait-g.fixed120.meanWait,
				100*(meanAd.nodeHours/g.frontier-1), 100*(meanAd.nodeHours/g.curve-1), metEnv, metCurve, line)
		}
	}
}

// slope returns the node-hours per second of mean wait from fixed idle
// time a to b among pts (in steps from 0 s).
func slope(pts []fixedPoint, a, b int) float64 {
	step := pts[1].idle
	p, q := pts[a/step], pts[b/step]
	return (q.nodeHours - p.nodeHours) / (q.meanWait - p.meanWait)
}

// lineResidual fits node-hours = a + b × mean wait to pts by least squares
// and returns the largest distance of a point from the line, as a share of
// its node-hours.
func lineResidual(pts []fixedPoint) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		n++
		sx += p.meanWait
		sy += p.nodeHours
		sxx += p.meanWait * p.meanWait
		sxy += p.meanWait * p.nodeHours
	}
	b := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a := (sy - b*sx) / n
	worst := 0.0
	for _, p := range pts {
		worst = max(worst, math.Abs(p.nodeHours-(a+b*p.meanWait))/p.nodeHours)
	}
	return worst
}
