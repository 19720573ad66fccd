// Package schedule computes when start/stop schedules fire: 5-field cron
// expressions and Azure's recurrence triggers, in a time zone given by its
// Windows name (as Azure ML files write it) or its IANA name. Everything
// here is pure: callers pass the clock's time and get the next firing.
package schedule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed 5-field cron expression: minute hour day-of-month month
// day-of-week.
type Cron struct {
	minutes, hours, doms, months, dows []int
	// domAny and dowAny: a field written "*" does not restrict the day
	// (when both day fields are restricted, either matching is enough, as
	// in every cron since Vixie's).
	domAny, dowAny bool
}

var monthNames = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseCron parses a 5-field cron expression ("0 18 * * 1-5"). Fields take
// "*", numbers, ranges "a-b", lists "a,b", steps "*/n" and "a-b/n", and
// month and day names (jan, mon).
func ParseCron(expr string) (*Cron, error) {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("cron expression %q has %d fields; want 5: minute hour day-of-month month day-of-week, e.g. \"0 18 * * 1-5\"", expr, len(f))
	}
	c := &Cron{domAny: f[2] == "*" || f[2] == "?", dowAny: f[4] == "*" || f[4] == "?"}
	var err error
	if c.minutes, err = field(f[0], "minute", 0, 59, nil); err != nil {
		return nil, err
	}
	if c.hours, err = field(f[1], "hour", 0, 23, nil); err != nil {
		return nil, err
	}
	if c.doms, err = field(f[2], "day-of-month", 1, 31, nil); err != nil {
		return nil, err
	}
	if c.months, err = field(f[3], "month", 1, 12, monthNames); err != nil {
		return nil, err
	}
	if c.dows, err = field(f[4], "day-of-week", 0, 7, dayNames); err != nil {
		return nil, err
	}
	for i, d := range c.dows {
		if d == 7 { // 7 is Sunday too
			c.dows[i] = 0
		}
	}
	slices.Sort(c.dows)
	c.dows = slices.Compact(c.dows)
	return c, nil
}

// field parses one cron field into its sorted values.
func field(s, name string, lo, hi int, names []string) ([]int, error) {
	bad := func(format string, args ...any) ([]int, error) {
		return nil, fmt.Errorf("cron %s field %q: %s", name, s, fmt.Sprintf(format, args...))
	}
	num := func(p string) (int, error) {
		if i := slices.Index(names, strings.ToLower(p)); i >= 0 {
			return i + offset(names), nil
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("%q is not a %s in %d-%d", p, name, lo, hi)
		}
		return n, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 {
				return bad("step %q must be a positive number", stepS)
			}
			step = n
		}
		from, to := lo, hi
		switch {
		case rng == "*" || rng == "?":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if from, err = num(a); err != nil {
				return bad("%v", err)
			}
			if to, err = num(b); err != nil {
				return bad("%v", err)
			}
			if from > to {
				return bad("range %s is backwards", rng)
			}
		default:
			n, err := num(rng)
			if err != nil {
				return bad("%v", err)
			}
			from, to = n, n
			if hasStep {
				to = hi
			}
		}
		for v := from; v <= to; v += step {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// offset is the number of the first name: months count from 1, days from 0.
func offset(names []string) int {
	if len(names) == 12 {
		return 1
	}
	return 0
}

func (c *Cron) dayMatches(t time.Time) bool {
	if !slices.Contains(c.months, int(t.Month())) {
		return false
	}
	dom := slices.Contains(c.doms, t.Day())
	dow := slices.Contains(c.dows, int(t.Weekday()))
	switch {
	case c.domAny && c.dowAny:
		return true
	case c.domAny:
		return dow
	case c.dowAny:
		return dom
	}
	return dom || dow
}

// maxDays bounds the search for the next firing ("0 0 30 2 *" never fires).
const maxDays = 366 * 5

// Next returns the first firing strictly after t, in loc's wall clock, or
// the zero time when there is none within five years. Wall-clock times
// are what the user wrote: "0 18 * * *" fires at 18:00 on both sides of a
// DST change. A time that does not exist that day (skipped by the clocks
// moving forward) fires at the same distance past the jump, once; a time
// that happens twice (clocks moving back) fires once.
func (c *Cron) Next(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 12, 0, 0, 0, loc)
	for i := 0; i < maxDays; i++ {
		d := day.AddDate(0, 0, i)
		if !c.dayMatches(d) {
			continue
		}
		for _, h := range c.hours {
			for _, m := range c.minutes {
				f := wallTime(d, h, m, loc)
				if f.After(t) {
					return f
				}
			}
		}
	}
	return time.Time{}
}

// wallTime is h:m on day d in loc. A time the clocks skip (02:30 on a
// spring-forward day) becomes the time as far past the jump (03:30).
func wallTime(d time.Time, h, m int, loc *time.Location) time.Time {
	f := time.Date(d.Year(), d.Month(), d.Day(), h, m, 0, 0, loc)
	if f.Hour() != h || f.Minute() != m {
		_, before := f.Zone()
		_, after := f.Add(3 * time.Hour).Zone()
		f = f.Add(time.Duration(after-before) * time.Second)
	}
	return f
}
