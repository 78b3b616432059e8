package corpus

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"strconv"
	"strings"
)

// Volatile are the fact paths whose values change on every agent run of an
// unchanged node: what facter measures at the moment it runs. A "*" element
// matches every key at that level (every mountpoint). Nothing else in the
// corpus's facts churns per run: the apt_* update facts change when apt
// updates its lists or packages, not per run, and are not volatile here.
var Volatile = [][]string{
	{"memory", "system", "available"},
	{"memory", "system", "available_bytes"},
	{"memory", "system", "capacity"},
	{"memory", "system", "used"},
	{"memory", "system", "used_bytes"},
	{"memoryfree"},
	{"memoryfree_mb"},
	{"load_averages", "1m"},
	{"load_averages", "5m"},
	{"load_averages", "15m"},
	{"mountpoints", "*", "available"},
	{"mountpoints", "*", "available_bytes"},
	{"mountpoints", "*", "capacity"},
	{"mountpoints", "*", "used"},
	{"mountpoints", "*", "used_bytes"},
	{"system_uptime", "days"},
	{"system_uptime", "hours"},
	{"system_uptime", "seconds"},
	{"system_uptime", "uptime"},
	{"uptime"},
	{"uptime_days"},
	{"uptime_hours"},
	{"uptime_seconds"},
}

// IsVolatile reports whether path matches one of Volatile.
func IsVolatile(path []string) bool {
	for _, v := range Volatile {
		if len(v) != len(path) {
			continue
		}
		match := true
		for i := range v {
			if v[i] != "*" && v[i] != path[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// runSpacing is how far apart in time Churn puts successive runs: a day,
// an hour, a minute and a second, so that even the coarse uptime facts
// (days, hours, "N days") differ in every run.
const runSpacing = 24*3600 + 3600 + 60 + 1

// Churn returns values as the node's agent would upload them at run number
// run (0, 1, 2, ...): every Volatile fact present gets a new plausible
// value, consistent with its siblings the way facter computes them (used +
// available stays the total, capacity and the human-readable sizes are
// derived from the bytes, memoryfree* mirror memory.system.available*), and
// nothing else changes. Memory and filesystem usage wander between 5% and
// 89% of their size, load averages between 0.01 and 8.00, and each run is a
// day and an hour after the one before (uptime grows). Every volatile fact
// differs from the recorded value and from its value in every other run
// (the usage and load figures repeat after 41 runs, uptime never); the same
// run number always gives the same values. Numbers stay json.Number of the
// same kind (an integer stays an integer, a float keeps a decimal point),
// strings keep facter's formats ("21.45 GiB", "8.89%", "3 days").
//
// The one exception: a mountpoint of size 0 (devpts and the like) has no
// usage to change, and keeps its values. run must not be negative.
//
// The copy is deep along the changed paths; unchanged subtrees are shared
// with values, which Churn never modifies.
func Churn(values map[string]any, run int) map[string]any {
	if run < 0 {
		panic("corpus: Churn of a negative run")
	}
	out := shallow(values)
	r := uint64(run) + 1 // run 0 differs from the recording too
	if sys, ok := dig(values, "memory", "system"); ok {
		total, okT := num(sys["total_bytes"])
		used, okU := num(sys["used_bytes"])
		if okT && okU && total > 0 {
			// Usage wanders between 5% and 89% of the total (see wander).
			newUsed := wander(used, total, r, "memory", 1024)
			avail := total - newUsed
			mem := shallow(values["memory"].(map[string]any))
			s := shallow(sys)
			s["used_bytes"] = intLike(sys["used_bytes"], newUsed)
			s["available_bytes"] = intLike(sys["available_bytes"], avail)
			s["used"] = HumanBytes(newUsed)
			s["available"] = HumanBytes(avail)
			s["capacity"] = fmt.Sprintf("%.2f%%", float64(newUsed)/float64(total)*100)
			mem["system"] = s
			out["memory"] = mem
			if _, ok := values["memoryfree"]; ok {
				out["memoryfree"] = HumanBytes(avail)
			}
			if v, ok := values["memoryfree_mb"]; ok {
				out["memoryfree_mb"] = floatLike(v, float64(avail)/(1024*1024))
			}
		}
	}
	if la, ok := values["load_averages"].(map[string]any); ok {
		l := shallow(la)
		for _, k := range []string{"1m", "5m", "15m"} {
			if v, ok := la[k]; ok {
				old, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
				// 0.01 .. 8.00 in hundredths, never the old value.
				oldSlot := uint64(max(0, min(math.Round(old*100)-1, 799)))
				n := float64(pick(oldSlot, r, 800, "load"+k)+1) / 100
				l[k] = floatLike(v, n)
			}
		}
		out["load_averages"] = l
	}
	if mps, ok := values["mountpoints"].(map[string]any); ok {
		m := shallow(mps)
		for name, v := range mps {
			mp, ok := v.(map[string]any)
			if !ok {
				continue
			}
			used, okU := num(mp["used_bytes"])
			avail, okA := num(mp["available_bytes"])
			if !okU || !okA || used+avail == 0 {
				continue
			}
			total := used + avail
			newUsed := wander(used, total, r, "mount:"+name, 4096)
			if newUsed == used {
				continue // too small to change
			}
			c := shallow(mp)
			c["used_bytes"] = intLike(mp["used_bytes"], newUsed)
			c["available_bytes"] = intLike(mp["available_bytes"], total-newUsed)
			c["used"] = HumanBytes(newUsed)
			c["available"] = HumanBytes(total - newUsed)
			c["capacity"] = mountCapacity(newUsed, total)
			m[name] = c
		}
		out["mountpoints"] = m
	}
	if up, ok := dig(values, "system_uptime"); ok {
		if secs, ok := num(up["seconds"]); ok {
			s := secs + r*runSpacing
			hours, days := s/3600, s/3600/24
			text := UptimeText(s)
			u := shallow(up)
			u["seconds"] = intLike(up["seconds"], s)
			u["hours"] = intLike(up["hours"], hours)
			u["days"] = intLike(up["days"], days)
			u["uptime"] = text
			out["system_uptime"] = u
			if v, ok := values["uptime_seconds"]; ok {
				out["uptime_seconds"] = intLike(v, s)
			}
			if v, ok := values["uptime_hours"]; ok {
				out["uptime_hours"] = intLike(v, hours)
			}
			if v, ok := values["uptime_days"]; ok {
				out["uptime_days"] = intLike(v, days)
			}
			if _, ok := values["uptime"]; ok {
				out["uptime"] = text
			}
		}
	}
	return out
}

// wander picks a new usage for run r between 5% and 89% of total: one of
// 42 slots of 2% each, never the old usage's slot, and a different slot for
// every run number below 41. Within its slot the value sits near the
// middle, so it is more than a third of a slot (0.75% of total) away from
// the old usage and from every other run's, and the formatted sizes and
// capacity change as well.
// The result is a whole number of units (1 KiB for memory, which
// /proc/meminfo counts in kB; a 4 KiB block for a filesystem) where the
// slot is large enough for that.
func wander(old, total, r uint64, key string, unit uint64) uint64 {
	const slots = 42
	lo, step := total/20, total/50
	if step == 0 {
		return old
	}
	oldSlot := uint64(0)
	if old > lo {
		oldSlot = min((old-lo)/step, slots-1)
	}
	slot := pick(oldSlot, r, slots, key)
	v := lo + slot*step + step/2 + mix(r, key)%(step/8+1)
	if step >= 64*unit {
		v -= v % unit
	}
	return v
}

// pick returns a slot in [0, slots) for run r: never old, and different
// for every r in [1, slots): old plus a multiple of a step coprime with
// slots, the step chosen per key.
func pick(old, r, slots uint64, key string) uint64 {
	k := 1 + mix(0, key)%(slots-1)
	for gcd(k, slots) != 1 {
		k++
	}
	slot := (old + r%slots*k) % slots
	if slot == old {
		slot = (slot + 1) % slots
	}
	return slot
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mix is a deterministic hash of a run number and a key.
func mix(r uint64, key string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", r, key)
	return h.Sum64()
}

// HumanBytes formats bytes as facter 4 does (UnitConverter.bytes_to_human_readable):
// the sizes in memory and mountpoint facts. gen writes the nodes' facts with it,
// Churn the changed ones.
func HumanBytes(b uint64) string {
	if b < 1024 {
		return strconv.FormatUint(b, 10) + " bytes"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	exp := int(math.Floor(math.Log2(float64(b)) / 10))
	n := math.Round(100*float64(b)/math.Pow(1024, float64(exp))) / 100
	if math.Abs(n-1024) < 1e-9 {
		exp++
		n = 1
	}
	return fmt.Sprintf("%.2f %s", n, units[exp-1])
}

// mountCapacity is facter 4's FilesystemHelper.compute_capacity.
func mountCapacity(used, total uint64) string {
	switch {
	case used == total:
		return "100%"
	case used > 0:
		return fmt.Sprintf("%.2f%%", float64(used)/float64(total)*100)
	default:
		return "0%"
	}
}

// UptimeText is facter 4's UptimeHelper.build_uptime_text: the uptime facts'
// text ("5:41 hours", "1 day", "38 days").
func UptimeText(secs uint64) string {
	hours := secs / 3600
	switch days := hours / 24; days {
	case 0:
		return fmt.Sprintf("%d:%02d hours", hours, secs/60%60)
	case 1:
		return "1 day"
	default:
		return fmt.Sprintf("%d days", days)
	}
}

// num reads a non-negative integer fact value.
func num(v any) (uint64, bool) {
	switch n := v.(type) {
	case json.Number:
		u, err := strconv.ParseUint(string(n), 10, 64)
		return u, err == nil
	case float64:
		return uint64(n), n >= 0 && n == math.Trunc(n)
	case int:
		return uint64(n), n >= 0
	case int64:
		return uint64(n), n >= 0
	}
	return 0, false
}

// intLike returns n in the representation of like: json.Number for a
// json.Number (the corpus's own facts), else the same Go type.
func intLike(like any, n uint64) any {
	switch like.(type) {
	case float64:
		return float64(n)
	case int:
		return int(n)
	case int64:
		return int64(n)
	}
	return json.Number(strconv.FormatUint(n, 10))
}

// floatLike returns f in the representation of like; a json.Number keeps
// a decimal point, as Ruby prints a Float.
func floatLike(like any, f float64) any {
	if _, ok := like.(float64); ok {
		return f
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return json.Number(s)
}

// dig returns the hash at path in values.
func dig(values map[string]any, path ...string) (map[string]any, bool) {
	cur := values
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// shallow copies m's top level, into a new map even when m is nil (to
// which Churn and With then add).
func shallow(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return maps.Clone(m)
}

// With returns a copy of values with the fact at path set to value,
// creating hashes along the path where they are missing. Only the hashes
// along the path are copied; everything else is shared with values, which
// With never modifies. A path through a value that is not a hash replaces
// that value with a hash.
func With(values map[string]any, path []string, value any) map[string]any {
	out := shallow(values)
	if len(path) == 0 {
		return out
	}
	cur := out
	for _, k := range path[:len(path)-1] {
		next, _ := cur[k].(map[string]any)
		next = shallow(next)
		cur[k] = next
		cur = next
	}
	cur[path[len(path)-1]] = value
	return out
}
