// Package bench compares tide with Slurm and with the machine's own limit on
// one host: dispatch throughput of no-op jobs, submit-to-running latency on a
// warm node, scale-from-zero overhead, and the control plane's CPU and memory.
//
// Everything lives in the package's test (bench_test.go): `make bench` runs it
// at full size (TIDE_BENCH=full) and prints one table per benchmark; `make
// test` runs it at a small size so the benchmark keeps working. tide runs as a
// real `tide server` process with real agents (local provider); Slurm runs as
// one slurmctld and one slurmd per node, with munge, from a temporary folder.
package bench
