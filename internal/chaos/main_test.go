package chaos

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/tidetest"
)

var tideBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := tidetest.Build("../../cmd/tide")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tideBin = bin
	code := pgtest.Run(m)
	cleanup()
	printTable()
	os.Exit(code)
}

// full reports whether the full suite runs (TIDE_CHAOS=full, make chaos).
func full() bool { return os.Getenv("TIDE_CHAOS") == "full" }

// scale picks the short or the full figure.
func scale(short, long int) int {
	if full() {
		return long
	}
	return short
}

// jobCount is the number of jobs of a scenario: short or long, or in the
// full suite TIDE_CHAOS_JOBS when set (a quicker full run).
func jobCount(short, long int) int {
	if n, err := strconv.Atoi(os.Getenv("TIDE_CHAOS_JOBS")); err == nil && n > 0 && full() {
		return n
	}
	return scale(short, long)
}

// row is one scenario's outcome.
type row struct {
	scenario                                   string
	jobs, kills, preemptions, lost, duplicated int
	took                                       string
}

var (
	tableMu sync.Mutex
	table   []row
)

func record(r row) {
	tableMu.Lock()
	table = append(table, r)
	tableMu.Unlock()
}

// printTable prints the scenarios' outcomes as a Markdown table.
func printTable() {
	if len(table) == 0 {
		return
	}
	var b strings.Builder
	mode := "short"
	if full() {
		mode = "full"
	}
	fmt.Fprintf(&b, "\nchaos suite (%s):\n\n", mode)
	fmt.Fprintf(&b, "| %-44s | %5s | %5s | %11s | %4s | %10s | %8s |\n", "scenario", "jobs", "kills", "preemptions", "lost", "duplicated", "took")
	fmt.Fprintf(&b, "|%s|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 46), strings.Repeat("-", 7), strings.Repeat("-", 7), strings.Repeat("-", 13), strings.Repeat("-", 6), strings.Repeat("-", 12), strings.Repeat("-", 10))
	for _, r := range table {
		fmt.Fprintf(&b, "| %-44s | %5d | %5d | %11d | %4d | %10d | %8s |\n", r.scenario, r.jobs, r.kills, r.preemptions, r.lost, r.duplicated, r.took)
	}
	fmt.Print(b.String())
}
