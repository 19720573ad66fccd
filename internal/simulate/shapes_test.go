package simulate

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// The workload shapes the adaptive policy is judged on (issue 23): a
// generator per shape, seeded. The policy's design was tried on training
// seeds only (trainSeeds); the tests and docs/simulate-results.md report
// the test seeds, which no choice was made on: they were run once, after
// the design was fixed. seenSeeds were the test seeds of earlier versions
// of the policy: their results were seen while later versions were
// designed, so they are no test any more. (4001-4003, the test seeds of
// the version before booting ahead in bursts, were looked at while it was
// designed: their table was published, and its misses named the shapes to
// work on. 5001-5003 were chosen before that version was run on them.
// 6001-6003 were the fresh test seeds of the mix of two idle times tried
// after it, which was not merged; its run on them, with the policy's
// choices unchanged, is reported, so they are seen too. Every seed up to
// 6003 is seen. 7001-7003 were fixed at 11:44 UTC on 2026-11-27, before
// session 36's version was designed or run on them: they are its test
// seeds, run once when its design is fixed, and seen since. 8001-8003 were
// fixed at 12:38 UTC, before any run on them, for the version designed
// after 7001-7003 were run (the check on chance recurrences in
// pre-warming), and run once with it at 12:48 UTC. Every seed up to 8003
// is seen. 9001-9003 were fixed at 14:47 UTC on 2026-11-27, before any
// run on them and before session 37 built or chose anything: they are the
// test seeds of the policy that session 37 lands, run once when it is
// fixed.)
var (
	trainSeeds = []uint64{1, 2, 3, 11, 12, 13, 21, 22, 23}
	seenSeeds  = []uint64{1001, 1002, 1003, 2001, 2002, 2003, 3001, 3002, 3003, 4001, 4002, 4003, 5001, 5002, 5003, 6001, 6002, 6003, 7001, 7002, 7003, 8001, 8002, 8003}
	testSeeds  = []uint64{9001, 9002, 9003}
)

// shape generates a trace of days days from a seeded random source.
type shape struct {
	name string
	gen  func(r *rand.Rand, days int) []Job
	// target says TestAdaptiveGeneralises asserts the whole target for the
	// shape with the frontier read as the lower envelope of the fixed
	// points (frontierAt; where it held on every test seed), and curve
	// that it asserts it with the frontier read as the curve of the fixed
	// idle times (curveAt; decided on the training seeds before 7001-7003
	// were run: it held on every training trace of every shape but sparse).
	target, curve bool
}

var shapes = []shape{
	{"poisson", genPoisson, false, true},
	{"diurnal", genDiurnal, false, true},
	{"bursty-batch", genBursty, true, true},
	{"heavy-tail", genHeavyTail, false, true},
	{"multi-gpu", genMultiGPU, false, true},
	{"sparse", genSparse, false, false},
	{"daily-batch", genDailyBatch, false, true},
}

// genTrace returns shape sh's trace for seed, days long.
func genTrace(sh shape, seed uint64, days int) *Trace {
	r := rand.New(rand.NewPCG(seed, uint64(len(sh.name))))
	jobs := sh.gen(r, days)
	slices.SortStableFunc(jobs, func(a, b Job) int { return int(a.Submit - b.Submit) })
	return &Trace{File: sh.name, Jobs: jobs, Start: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// expRun is a run time with an exponential distribution of the given mean,
// at least 30 s.
func expRun(r *rand.Rand, mean float64) time.Duration {
	return secs(max(30, r.ExpFloat64()*mean))
}

// poissonJobs draws jobs at a rate per second given by rate(t) (at most
// peak), by thinning.
func poissonJobs(r *rand.Rand, days int, peak float64, rate func(t float64) float64, job func(at time.Duration) Job) []Job {
	var out []Job
	end := float64(days) * 86400
	for t := r.ExpFloat64() / peak; t < end; t += r.ExpFloat64() / peak {
		if r.Float64()*peak <= rate(t) {
			out = append(out, job(secs(t)))
		}
	}
	return out
}

// genPoisson: steady arrivals, one job every 2-10 minutes on average, run
// times of mean 30 min, a tenth of the jobs on 2-8 nodes.
func genPoisson(r *rand.Rand, days int) []Job {
	mean := 120 + r.Float64()*480
	return poissonJobs(r, days, 1/mean, func(float64) float64 { return 1 / mean }, func(at time.Duration) Job {
		n := 1
		if r.IntN(10) == 0 {
			n = 2 + r.IntN(7)
		}
		return Job{Submit: at, Duration: expRun(r, 1800), Instances: n}
	})
}

// genDiurnal: working hours busy (up to one job a minute), nights and
// weekends nearly idle.
func genDiurnal(r *rand.Rand, days int) []Job {
	peak := 1 / (40 + r.Float64()*60)
	start := 8 + r.Float64()*2
	return poissonJobs(r, days, peak, func(t float64) float64 {
		day, hour := int(t/86400), math.Mod(t/3600, 24)
		if day%7 >= 5 {
			return peak / 50
		}
		if hour < start || hour > start+10 {
			return peak / 20
		}
		return peak * (0.5 + 0.5*math.Sin(math.Pi*(hour-start)/10))
	}, func(at time.Duration) Job {
		return Job{Submit: at, Duration: expRun(r, 1200), Instances: 1 + r.IntN(2)}
	})
}

// genBursty: batches of 5-60 jobs submitted within a minute, a batch every
// 1-4 hours on average, at the same minute of the hour when scheduled (a
// cron) half of the time.
func genBursty(r *rand.Rand, days int) []Job {
	var out []Job
	gap := 3600 * (1 + 3*r.Float64())
	cron := r.IntN(2) == 0
	end := float64(days) * 86400
	for t := r.ExpFloat64() * gap; t < end; t += r.ExpFloat64() * gap {
		at := t
		if cron {
			at = math.Floor(t/3600)*3600 + 600
		}
		n := 5 + r.IntN(56)
		for range n {
			out = append(out, Job{Submit: secs(at + r.Float64()*60), Duration: expRun(r, 900), Instances: 1})
		}
	}
	return out
}

// genHeavyTail: Poisson arrivals, Pareto run times (shape 1.2, from 30 s,
// at most 3 days).
func genHeavyTail(r *rand.Rand, days int) []Job {
	mean := 60 + r.Float64()*240
	return poissonJobs(r, days, 1/mean, func(float64) float64 { return 1 / mean }, func(at time.Duration) Job {
		d := math.Min(30*math.Pow(1-r.Float64(), -1/1.2), 3*86400)
		return Job{Submit: at, Duration: secs(d), Instances: 1}
	})
}

// genMultiGPU: mostly gangs: 70 % of the jobs on 2-16 nodes.
func genMultiGPU(r *rand.Rand, days int) []Job {
	mean := 300 + r.Float64()*900
	return poissonJobs(r, days, 1/mean, func(float64) float64 { return 1 / mean }, func(at time.Duration) Job {
		n := 1
		if r.Float64() < 0.7 {
			n = 2 << r.IntN(4)
		}
		return Job{Submit: at, Duration: expRun(r, 3600), Instances: n}
	})
}

// genSparse: a job every 1-3 hours on average, short runs.
func genSparse(r *rand.Rand, days int) []Job {
	mean := 3600 * (1 + 2*r.Float64())
	return poissonJobs(r, days, 1/mean, func(float64) float64 { return 1 / mean }, func(at time.Duration) Job {
		return Job{Submit: at, Duration: expRun(r, 600), Instances: 1}
	})
}

// genDailyBatch: a pipeline submits 10-40 jobs within 30 s at the same
// minute every day, over a background of a job every 10-30 minutes.
func genDailyBatch(r *rand.Rand, days int) []Job {
	mean := 600 + r.Float64()*1200
	out := poissonJobs(r, days, 1/mean, func(float64) float64 { return 1 / mean }, func(at time.Duration) Job {
		return Job{Submit: at, Duration: expRun(r, 1800), Instances: 1}
	})
	at := float64(r.IntN(24*60)) * 60
	n := 10 + r.IntN(31)
	for d := range days {
		for range n {
			out = append(out, Job{Submit: secs(float64(d)*86400 + at + r.Float64()*30), Duration: expRun(r, 1200), Instances: 1})
		}
	}
	return out
}
