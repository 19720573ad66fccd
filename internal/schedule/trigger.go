package schedule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
)

// Trigger tells when a schedule fires.
type Trigger struct {
	loc   *time.Location
	start time.Time // zero: no start time
	cron  *Cron
	// A recurrence: every interval units of freq; at hours×minutes (on
	// weekDays or monthDays) for day, week and month frequencies.
	freq                      string
	interval                  int
	hours, minutes, monthDays []int
	weekDays                  []time.Weekday
}

// FieldError is a problem with one field of a trigger (a path relative to
// the trigger, such as "expression").
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Frequencies of a recurrence trigger, as Azure ML names them.
var Frequencies = []string{"minute", "hour", "day", "week", "month"}

var weekDayNames = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// startLayout is Azure's start_time format (a wall-clock time in the
// trigger's time zone).
const startLayout = "2006-01-02T15:04:05"

// Compile checks t and returns its Trigger. The error is a *FieldError.
func Compile(t api.Trigger) (*Trigger, error) {
	loc, err := Location(t.TimeZone)
	if err != nil {
		return nil, &FieldError{"time_zone", err.Error()}
	}
	tr := &Trigger{loc: loc}
	if s := strings.TrimSpace(t.StartTime); s != "" {
		st, err := time.ParseInLocation(startLayout, strings.TrimSuffix(s, "Z"), loc)
		if err != nil {
			if st, err = time.Parse(time.RFC3339, s); err != nil {
				return nil, &FieldError{"start_time", fmt.Sprintf("%q is not a time; write it as 2021-03-10T21:21:07", s)}
			}
		}
		tr.start = st
	}
	switch strings.ToLower(t.Type) {
	case "cron":
		if strings.TrimSpace(t.Expression) == "" {
			return nil, &FieldError{"expression", "required for a cron trigger, e.g. \"0 18 * * *\""}
		}
		c, err := ParseCron(t.Expression)
		if err != nil {
			return nil, &FieldError{"expression", err.Error()}
		}
		tr.cron = c
	case "recurrence":
		if err := tr.recurrence(t); err != nil {
			return nil, err
		}
	case "":
		return nil, &FieldError{"type", "required; cron or recurrence"}
	default:
		return nil, &FieldError{"type", fmt.Sprintf("must be cron or recurrence, got %q", t.Type)}
	}
	return tr, nil
}

func (tr *Trigger) recurrence(t api.Trigger) error {
	tr.freq = strings.ToLower(t.Frequency)
	if !slices.Contains(Frequencies, tr.freq) {
		return &FieldError{"frequency", fmt.Sprintf("must be one of %s, got %q", strings.Join(Frequencies, ", "), t.Frequency)}
	}
	tr.interval = t.Interval
	if tr.interval == 0 {
		tr.interval = 1
	}
	if tr.interval < 0 {
		return &FieldError{"interval", fmt.Sprintf("must be >= 1, got %d", t.Interval)}
	}
	if tr.freq == "minute" || tr.freq == "hour" {
		if t.Schedule != nil && (len(t.Schedule.WeekDays) > 0 || len(t.Schedule.MonthDays) > 0) {
			return &FieldError{"schedule", "week_days and month_days need frequency day, week or month"}
		}
		return nil
	}
	s := t.Schedule
	if s == nil || len(s.Hours) == 0 || len(s.Minutes) == 0 {
		return &FieldError{"schedule", fmt.Sprintf("required with frequency %s: hours and minutes, e.g. {hours: [18], minutes: [0]}", tr.freq)}
	}
	for _, h := range s.Hours {
		if h < 0 || h > 23 {
			return &FieldError{"schedule.hours", fmt.Sprintf("%d is not an hour in 0-23", h)}
		}
	}
	for _, m := range s.Minutes {
		if m < 0 || m > 59 {
			return &FieldError{"schedule.minutes", fmt.Sprintf("%d is not a minute in 0-59", m)}
		}
	}
	for _, d := range s.MonthDays {
		if d < 1 || d > 31 {
			return &FieldError{"schedule.month_days", fmt.Sprintf("%d is not a day of the month in 1-31", d)}
		}
	}
	for _, w := range s.WeekDays {
		i := slices.Index(weekDayNames, strings.ToLower(w))
		if i < 0 {
			return &FieldError{"schedule.week_days", fmt.Sprintf("%q is not a week day; use monday ... sunday", w)}
		}
		tr.weekDays = append(tr.weekDays, time.Weekday(i))
	}
	tr.hours, tr.minutes, tr.monthDays = sorted(s.Hours), sorted(s.Minutes), s.MonthDays
	return nil
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// Location is the trigger's time zone.
func (tr *Trigger) Location() *time.Location { return tr.loc }

// Next returns the first firing strictly after t (and not before the
// start time), or the zero time when there is none.
func (tr *Trigger) Next(t time.Time) time.Time {
	if !tr.start.IsZero() && t.Before(tr.start) {
		t = tr.start.Add(-time.Nanosecond)
	}
	if tr.cron != nil {
		return tr.cron.Next(t, tr.loc)
	}
	switch tr.freq {
	case "minute", "hour":
		unit := time.Minute
		if tr.freq == "hour" {
			unit = time.Hour
		}
		step := time.Duration(tr.interval) * unit
		origin := tr.start
		if origin.IsZero() {
			origin = time.Date(2000, 1, 1, 0, 0, 0, 0, tr.loc)
		}
		n := t.Sub(origin)/step + 1
		return origin.Add(n * step)
	}
	lt := t.In(tr.loc)
	origin := tr.start.In(tr.loc)
	if tr.start.IsZero() {
		origin = lt
	}
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 12, 0, 0, 0, tr.loc)
	for i := 0; i < maxDays; i++ {
		d := day.AddDate(0, 0, i)
		if !tr.dayMatches(d, origin) {
			continue
		}
		for _, h := range tr.hours {
			for _, m := range tr.minutes {
				f := wallTime(d, h, m, tr.loc)
				if f.After(t) {
					return f
				}
			}
		}
	}
	return time.Time{}
}

// dayMatches says whether a recurrence fires on day d, counting periods
// of interval from origin's day.
func (tr *Trigger) dayMatches(d, origin time.Time) bool {
	o := time.Date(origin.Year(), origin.Month(), origin.Day(), 12, 0, 0, 0, tr.loc)
	days := int(d.Sub(o).Round(24*time.Hour) / (24 * time.Hour))
	switch tr.freq {
	case "day":
		return days%tr.interval == 0
	case "week":
		// Weeks start on Sunday, as Azure's recurrence counts them.
		wd := []time.Weekday{origin.Weekday()}
		if len(tr.weekDays) > 0 {
			wd = tr.weekDays
		}
		weeks := (days + int(o.Weekday())) / 7
		if days+int(o.Weekday()) < 0 {
			weeks--
		}
		return slices.Contains(wd, d.Weekday()) && weeks%tr.interval == 0
	default: // month
		md := []int{origin.Day()}
		if len(tr.monthDays) > 0 {
			md = tr.monthDays
		}
		months := (d.Year()-o.Year())*12 + int(d.Month()) - int(o.Month())
		return slices.Contains(md, d.Day()) && months%tr.interval == 0
	}
}

// Last returns the latest firing in (from, to], or the zero time: what a
// server that was down between from and to missed.
func (tr *Trigger) Last(from, to time.Time) time.Time {
	// A firing older than a month is not worth applying late.
	if from.Before(to.AddDate(0, -1, 0)) {
		from = to.AddDate(0, -1, 0)
	}
	var last time.Time
	for f := tr.Next(from); !f.IsZero() && !f.After(to); f = tr.Next(f) {
		last = f
	}
	return last
}
