package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

func TestEveryWindowsZoneLoads(t *testing.T) {
	for win, iana := range windowsZones {
		if _, err := Location(win); err != nil {
			t.Errorf("%s -> %s: %v", win, iana, err)
		}
	}
	la, err := Location("pacific standard time")
	if err != nil || la.String() != "America/Los_Angeles" {
		t.Fatalf("Pacific Standard Time = %v, %v", la, err)
	}
	if _, err := Location("Mars Standard Time"); err == nil || !strings.Contains(err.Error(), "unknown time zone") {
		t.Fatalf("unknown zone: %v", err)
	}
	if l, err := Location("Europe/Paris"); err != nil || l.String() != "Europe/Paris" {
		t.Fatalf("IANA name: %v %v", l, err)
	}
}

// A daily 18:00 stop in Pacific time stays at 18:00 wall-clock time across
// both DST changes of 2026 (March 8 and November 1), so its UTC time moves.
func TestCronKeepsWallClockAcrossDST(t *testing.T) {
	tr, err := Compile(api.Trigger{Type: "cron", Expression: "0 18 * * *", TimeZone: "Pacific Standard Time"})
	if err != nil {
		t.Fatal(err)
	}
	la, _ := time.LoadLocation("America/Los_Angeles")
	from := time.Date(2026, 3, 7, 12, 0, 0, 0, la)
	want := []string{"2026-03-07T18:00:00-08:00", "2026-03-08T18:00:00-07:00", "2026-03-09T18:00:00-07:00"}
	for _, w := range want {
		from = tr.Next(from)
		if got := from.Format(time.RFC3339); got != w {
			t.Fatalf("next = %s, want %s", got, w)
		}
	}
	from = time.Date(2026, 10, 31, 19, 0, 0, 0, la)
	if got := tr.Next(from).UTC().Format(time.RFC3339); got != "2026-11-02T02:00:00Z" {
		t.Fatalf("after fall back: %s", got) // Nov 1 18:00 PST = 02:00Z on Nov 2
	}
	// 02:30 does not exist on March 8 in Los Angeles: it fires once, just
	// after the jump; on November 1, 01:30 happens twice: it fires once.
	gap, _ := Compile(api.Trigger{Type: "cron", Expression: "30 2 * * *", TimeZone: "America/Los_Angeles"})
	f := gap.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, la))
	if f.Day() != 8 || f.Hour() != 3 {
		t.Fatalf("skipped time fires at %s", f)
	}
	twice, _ := Compile(api.Trigger{Type: "cron", Expression: "30 1 * * *", TimeZone: "America/Los_Angeles"})
	f = twice.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, la))
	if n := twice.Next(f); n.Day() != 2 {
		t.Fatalf("01:30 on Nov 1 fired twice: %s then %s", f, n)
	}
}

func TestCronFields(t *testing.T) {
	for expr, want := range map[string]string{
		"*/15 9-17 * * mon-fri": "2026-11-24T10:15:00Z", // a Tuesday
		"0 0 1 jan *":           "2027-01-01T00:00:00Z",
		"0 6 * * 0,7":           "2026-11-29T06:00:00Z", // Sunday both ways
		"0 12 1 * 1":            "2026-11-30T12:00:00Z", // day 1 OR Monday
	} {
		tr, err := Compile(api.Trigger{Type: "cron", Expression: expr})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if got := tr.Next(time.Date(2026, 11, 24, 10, 7, 0, 0, time.UTC)).Format(time.RFC3339); got != want {
			t.Errorf("%s: next %s, want %s", expr, got, want)
		}
	}
	for expr, msg := range map[string]string{
		"0 18 * *":       "has 4 fields",
		"61 * * * *":     "not a minute",
		"0 25 * * *":     "not a hour",
		"0 0 * * funday": "not a day-of-week",
		"*/0 * * * *":    "positive number",
		"5-1 * * * *":    "backwards",
	} {
		_, err := Compile(api.Trigger{Type: "cron", Expression: expr})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want %q", expr, err, msg)
		}
	}
}

func TestRecurrence(t *testing.T) {
	tr, err := Compile(api.Trigger{Type: "recurrence", Frequency: "week", Interval: 1, TimeZone: "W. Europe Standard Time",
		Schedule: &api.RecurrenceSchedule{Hours: []int{8}, Minutes: []int{30}, WeekDays: []string{"Monday", "friday"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := tr.Next(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)) // Tuesday
	if got.Format(time.RFC3339) != "2026-11-27T08:30:00+01:00" {
		t.Fatalf("next = %s", got)
	}
	every2h, err := Compile(api.Trigger{Type: "recurrence", Frequency: "hour", Interval: 2, StartTime: "2026-11-24T01:00:00"})
	if err != nil {
		t.Fatal(err)
	}
	if got := every2h.Next(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)); got.Hour() != 5 {
		t.Fatalf("every 2h from 01:00: next after 04:00 is %s", got)
	}
	start, _ := Compile(api.Trigger{Type: "cron", Expression: "0 18 * * *", StartTime: "2030-01-01T00:00:00"})
	if got := start.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); got.Year() != 2030 {
		t.Fatalf("start_time ignored: %s", got)
	}
	if last := start.Last(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2030, 1, 3, 12, 0, 0, 0, time.UTC)); last.Day() != 2 {
		t.Fatalf("last missed firing = %s", last)
	}
	for _, bad := range []api.Trigger{
		{Type: "recurrence", Frequency: "fortnight"},
		{Type: "recurrence", Frequency: "day"},
		{Type: "recurrence", Frequency: "week", Schedule: &api.RecurrenceSchedule{Hours: []int{8}, Minutes: []int{0}, WeekDays: []string{"moonday"}}},
		{Type: "cron", Expression: "0 1 * * *", TimeZone: "Nowhere/Land"},
		{Type: "cron", Expression: "0 1 * * *", StartTime: "yesterday"},
		{Type: "weekly"},
	} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}
