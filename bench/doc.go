// Package bench compares tide with Slurm and with the machine's own limit on
// one host: dispatch throughput of no-op jobs, submit-to-running latency on a
// warm node, scale-from-zero overhead, and the control plane's CPU and memory.
//
// Everything lives in the package's tests: `make bench` runs them at full
// size (TIDE_BENCH=full) and prints one table per benchmark; `make test` runs
// them at a small size so the benchmark keeps working. tide runs as a real
// `tide server` process with real agents (local provider); Slurm runs as one
// slurmctld and one slurmd per node, with munge, from a temporary folder.
//
// TestScale (scale_test.go) measures the control plane alone at 10,000 nodes
// whose agents are goroutines of the benchmark speaking the agent protocol
// (internal/tidetest/simagent) for the nodes of a fake provider that hands over their
// tokens. TIDE_SCALE_NODES, TIDE_SCALE_COMPUTES, TIDE_SCALE_JOBS,
// TIDE_SCALE_ROUNDS and TIDE_SCALE_WINDOW change its size for a quick look;
// TIDE_BENCH_BIN runs another commit's binary in every section, as in
// TestDispatch.
package bench
