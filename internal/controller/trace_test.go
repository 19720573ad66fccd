package controller

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
)

// TestTurnTrace checks that a turn logs how long each of its phases took
// when the log prints debug records, and logs nothing otherwise.
func TestTurnTrace(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var out bytes.Buffer
		st := openSQLite(t)
		c := New(Options{Store: st, Catalog: catalog.Default(), Config: config.Default(), Changes: NewBroadcast(),
			Log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})), Now: func() time.Time { return time.Unix(0, 0) }})
		if _, err := c.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		logged := out.String()
		if level == slog.LevelInfo {
			if strings.Contains(logged, "controller turn") {
				t.Errorf("a turn logged its trace at level %s:\n%s", level, logged)
			}
			continue
		}
		for _, phase := range []string{"load=", "liveness=", "place=", "plan=", "reasons=", "status=", "commit=", "total=", "gc="} {
			if !strings.Contains(logged, phase) {
				t.Errorf("the turn's trace lacks %q:\n%s", phase, logged)
			}
		}
	}
}
