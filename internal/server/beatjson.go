package server

import (
	"encoding/json"
	"strconv"

	"github.com/tideml/tide/api"
)

// decodeBeat decodes the JSON heartbeat b into hb, as json.Unmarshal
// does. At 10,000 nodes (1,000 heartbeats a second) json.Unmarshal was a
// tenth of the server's CPU: it finds each field by reflection and grows
// the stack of the goroutine that calls it, so that a stream's reader
// could not decode its heartbeats itself (agentbeats.go). What an agent
// sends (encoding/json's output for api.AgentHeartbeat without activity)
// is read here field by field; anything else (activity, escapes, non-ASCII
// text, null, a repeated or unknown name, a number that does not fit)
// goes to json.Unmarshal, which decides. FuzzDecodeBeat holds the two to
// the same result.
func decodeBeat(b []byte, hb *api.AgentHeartbeat) error {
	d := beatScan{b: b}
	if d.heartbeat(hb) {
		return nil
	}
	*hb = api.AgentHeartbeat{}
	return json.Unmarshal(b, hb)
}

// beatScan reads a heartbeat's JSON from b[i:]. Each method reports
// whether it read what it expects; false sends the heartbeat to
// json.Unmarshal.
type beatScan struct {
	b []byte
	i int
}

// The names of the objects a heartbeat holds, in the order of the
// indexes fields gives read.
var (
	heartbeatFields   = []string{"node_id", "running", "usage", "utilization", "cache", "refused"}
	usageFields       = []string{"cpu_seconds", "memory_bytes", "peak_memory_bytes", "gpu_percent", "gpu_memory_bytes", "disk_bytes", "samples", "note"}
	utilizationFields = []string{"cpu_percent", "memory_bytes", "gpu_percent", "gpu_memory_bytes"}
	cacheFields       = []string{"hits", "misses", "evictions", "entries", "bytes", "limit_bytes"}
)

// fields reads an object whose names are among names (at most 32), each
// at most once, calling read with the index of each name in names and the
// scan at its value. Another name (activity in a heartbeat, or one
// json.Unmarshal matches otherwise) or a repeated one returns false.
func (d *beatScan) fields(names []string, read func(f int) bool) bool {
	var seen uint32
	return d.object(func(key []byte) bool {
		for f, name := range names {
			if name == string(key) {
				if seen&(1<<f) != 0 {
					return false
				}
				seen |= 1 << f
				return read(f)
			}
		}
		return false
	})
}

func (d *beatScan) heartbeat(hb *api.AgentHeartbeat) bool {
	ok := d.fields(heartbeatFields, func(f int) bool {
		switch f {
		case 0:
			s, ok := d.str()
			hb.NodeID = string(s)
			return ok
		case 1:
			hb.Running = []string{}
			return d.strings(&hb.Running)
		case 2:
			hb.Usage = map[string]api.JobUsage{}
			return d.object(func(id []byte) bool {
				if _, dup := hb.Usage[string(id)]; dup {
					return false
				}
				var u api.JobUsage
				if !d.usage(&u) {
					return false
				}
				hb.Usage[string(id)] = u
				return true
			})
		case 3:
			hb.Utilization = &api.NodeUtilization{}
			return d.utilization(hb.Utilization)
		case 4:
			hb.Cache = &api.NodeCache{}
			return d.cache(hb.Cache)
		}
		hb.Refused = []string{}
		return d.strings(&hb.Refused)
	})
	d.space()
	return ok && d.i == len(d.b)
}

func (d *beatScan) usage(u *api.JobUsage) bool {
	return d.fields(usageFields, func(f int) bool {
		switch f {
		case 0:
			return d.float(&u.CPUSeconds)
		case 1:
			return d.int64(&u.MemoryBytes)
		case 2:
			return d.int64(&u.PeakMemoryBytes)
		case 3:
			u.GPUPercent = new(float64)
			return d.float(u.GPUPercent)
		case 4:
			return d.int64(&u.GPUMemoryBytes)
		case 5:
			return d.int64(&u.DiskBytes)
		case 6:
			return d.int(&u.Samples)
		}
		s, ok := d.str()
		u.Note = string(s)
		return ok
	})
}

func (d *beatScan) utilization(u *api.NodeUtilization) bool {
	return d.fields(utilizationFields, func(f int) bool {
		switch f {
		case 0:
			return d.float(&u.CPUPercent)
		case 1:
			return d.int64(&u.MemoryBytes)
		case 2:
			u.GPUPercent = new(float64)
			return d.float(u.GPUPercent)
		}
		return d.int64(&u.GPUMemoryBytes)
	})
}

func (d *beatScan) cache(c *api.NodeCache) bool {
	return d.fields(cacheFields, func(f int) bool {
		switch f {
		case 0:
			return d.int64(&c.Hits)
		case 1:
			return d.int64(&c.Misses)
		case 2:
			return d.int64(&c.Evictions)
		case 3:
			return d.int(&c.Entries)
		case 4:
			return d.int64(&c.Bytes)
		}
		return d.int64(&c.LimitBytes)
	})
}

func (d *beatScan) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and reads c.
func (d *beatScan) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling field for each name with the scan at
// its value.
func (d *beatScan) object(field func(key []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		key, ok := d.str()
		if !ok || !d.next(':') || !field(key) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// strings reads an array of strings, appending them to *out.
func (d *beatScan) strings(out *[]string) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		s, ok := d.str()
		if !ok {
			return false
		}
		*out = append(*out, string(s))
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// str reads a string of printable ASCII without escapes: its bytes are
// its value.
func (d *beatScan) str() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	for j := d.i; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i:j]
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// number reads a number as JSON writes it; integer says it has neither
// fraction nor exponent.
func (d *beatScan) number() (lit []byte, integer bool) {
	d.space()
	b, j := d.b, d.i
	digits := func() bool {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return nil, false
	}
	integer = true
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return nil, false
		}
		integer = false
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
		integer = false
	}
	lit, d.i = b[d.i:j], j
	return lit, true
}

func (d *beatScan) float(v *float64) bool {
	lit, _ := d.number()
	if lit == nil {
		return false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	*v = f
	return err == nil
}

func (d *beatScan) int64(v *int64) bool {
	lit, integer := d.number()
	if !integer {
		return false
	}
	n, err := strconv.ParseInt(string(lit), 10, 64)
	*v = n
	return err == nil
}

func (d *beatScan) int(v *int) bool {
	lit, integer := d.number()
	if !integer {
		return false
	}
	n, err := strconv.ParseInt(string(lit), 10, strconv.IntSize)
	*v = int(n)
	return err == nil
}
