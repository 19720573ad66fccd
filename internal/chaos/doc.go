// Package chaos is tide's chaos suite: tests that break the control plane
// on purpose while jobs run, and check that nothing is lost and nothing
// runs twice. Its tests start real `tide server` processes (SQLite and
// PostgreSQL), real agents and real jobs, then kill the server with
// SIGKILL every few seconds, kill the leading replica and restart
// PostgreSQL under two replicas, preempt half of the busy low-priority
// nodes at once, twice (8 nodes with real agents beside 192 simulated
// ones, internal/tidetest/simagent) and at random (preemption_rate), cut a gang's node off the network (sshd hosts in network
// namespaces), make a location's capacity unavailable for a while, and
// fill the disk under the data dir. Each prints a row of the
// table `make chaos` shows (jobs, kills, preemptions, lost, duplicated);
// docs/reliability.md quotes a full run.
//
// The package has no code of its own: `go test ./internal/chaos` runs the
// short form (in `make test`), TIDE_CHAOS=full the full one (`make chaos`).
package chaos
