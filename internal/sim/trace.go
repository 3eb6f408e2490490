package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A trace is a user's own job list, replayed instead of a synthetic draw:
// "what would nicaffinity have done with last week's jobs". It is CSV, one
// job a line:
//
//	arrival,pods,gpus,duration,network
//	0s,1,8,2h,rdma
//	2026-11-24T09:15:00Z,4,8,6h30m,rdma
//	90m,1,1,20m,none
//
// arrival is a duration from the trace's start or an RFC 3339 time (all
// times are then counted from the earliest; the two kinds do not mix);
// pods and gpus are the job's pods and GPUs per pod; duration is its
// runtime with GPUDirect RDMA on every GPU; network is none, rdma (the
// shared rdma/hca resource) or vf (an SR-IOV VF a pod). Blank lines and
// lines starting with # are skipped, and a first line naming the columns
// is optional. The file is outside data: it is capped in size, lines and
// values, and every error names its file and line.
const (
	maxTraceBytes = 16 << 20
	maxTraceLine  = 1024
	maxArrival    = 366 * 24 * time.Hour
)

// Trace is a parsed job list.
type Trace struct {
	File string
	jobs []job
}

// Jobs is how many jobs the trace holds.
func (t *Trace) Jobs() int { return len(t.jobs) }

// ParseTrace reads a trace; file names it in errors.
func ParseTrace(file string, b []byte) (*Trace, error) {
	if len(b) > maxTraceBytes {
		return nil, &SpecError{File: file, Msg: fmt.Sprintf("%d bytes: a trace may have at most %d", len(b), maxTraceBytes)}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, maxTraceLine), maxTraceLine)
	var rows []traceRow
	stamps, offsets := 0, 0
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		bad := func(field, format string, args ...any) error {
			return &SpecError{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
		}
		f := strings.Split(text, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(rows) == 0 && stamps+offsets == 0 && len(f) > 0 && strings.EqualFold(f[0], "arrival") {
			if !slices.Equal(f, []string{"arrival", "pods", "gpus", "duration", "network"}) {
				return nil, bad("", "header %q: want arrival,pods,gpus,duration,network", text)
			}
			continue
		}
		if len(f) != 5 {
			return nil, bad("", "%d fields: want arrival,pods,gpus,duration,network", len(f))
		}
		if len(rows) == maxJobs {
			return nil, bad("", "more than %d jobs", maxJobs)
		}
		r, stamp, err := parseTraceRow(f, bad)
		if err != nil {
			return nil, err
		}
		r.line = line
		if stamp {
			stamps++
		} else {
			offsets++
		}
		if stamps > 0 && offsets > 0 {
			return nil, bad("arrival", "%q: the trace mixes durations and times; use one kind", f[0])
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, &SpecError{File: file, Line: line + 1, Msg: fmt.Sprintf("%v (a line may have at most %d bytes)", err, maxTraceLine)}
	}
	if len(rows) == 0 {
		return nil, &SpecError{File: file, Msg: "no jobs"}
	}
	if stamps > 0 {
		first := rows[0].stamp
		for _, r := range rows {
			if r.stamp.Before(first) {
				first = r.stamp
			}
		}
		for i := range rows {
			rows[i].at = rows[i].stamp.Sub(first)
			if rows[i].at > maxArrival {
				return nil, &SpecError{File: file, Line: rows[i].line, Field: "arrival", Msg: fmt.Sprintf("%s after the first job: want at most %s", rows[i].at, maxArrival)}
			}
		}
	}
	// Jobs replay in arrival order, file order breaking ties.
	slices.SortStableFunc(rows, func(a, b traceRow) int { return cmp.Compare(a.at, b.at) })
	t := &Trace{File: file}
	for i, r := range rows {
		r.j.Name = fmt.Sprintf("job-%03d", i)
		r.j.At = r.at.Round(time.Millisecond)
		t.jobs = append(t.jobs, r.j)
	}
	return t, nil
}

// WithTrace is the workload with its jobs taken from t instead of drawn:
// the spec's durations, shares, load and seed no longer apply; its time
// model and maxWait do.
func (w WorkloadSpec) WithTrace(t *Trace) WorkloadSpec {
	w.trace, w.Jobs, w.Trace = t, t.Jobs(), t.File
	return w
}

// traceRow is one job of a trace, at the line it came from.
type traceRow struct {
	line  int
	at    time.Duration
	stamp time.Time
	j     job
}

// parseTraceRow reads one line's five fields; stamp says the arrival was
// an RFC 3339 time (else a duration from the start).
func parseTraceRow(f []string, bad func(field, format string, args ...any) error) (traceRow, bool, error) {
	var r traceRow
	stamp := false
	if d, err := time.ParseDuration(f[0]); err == nil {
		if d < 0 || d > maxArrival {
			return r, false, bad("arrival", "%s: want 0 to %s from the start", f[0], maxArrival)
		}
		r.at = d
	} else if ts, err := time.Parse(time.RFC3339, f[0]); err == nil {
		r.stamp, stamp = ts, true
	} else {
		return r, false, bad("arrival", "%q is neither a duration (like 90m) nor an RFC 3339 time (like 2026-11-24T09:15:00Z)", f[0])
	}
	pods, err := strconv.Atoi(f[1])
	if err != nil || pods < 1 || pods > maxJobPods {
		return r, false, bad("pods", "%q: want 1 to %d", f[1], maxJobPods)
	}
	gpus, err := strconv.Atoi(f[2])
	if err != nil || gpus < 1 || gpus > 8 {
		return r, false, bad("gpus", "%q: want 1 to 8 GPUs a pod", f[2])
	}
	d, err := time.ParseDuration(f[3])
	if err != nil || d <= 0 || d > maxDuration {
		return r, false, bad("duration", "%q: want a duration in (0, %s]", f[3], maxDuration)
	}
	r.j = job{Pods: pods, GPUs: gpus, Duration: d}
	switch f[4] {
	case "none":
	case "rdma":
		r.j.RDMA = true
	case "vf":
		r.j.RDMA, r.j.VF = true, true
	default:
		return r, false, bad("network", "%q: want none, rdma or vf", f[4])
	}
	return r, stamp, nil
}

// check refuses a trace the cluster or the time model can never run.
func (t *Trace) check(nodes []nodeInfo, m TimeModel) error {
	most, vfs := 0, false
	for _, n := range nodes {
		most = max(most, len(n.GPUs))
		vfs = vfs || n.VFNICs > 0
	}
	for _, j := range t.jobs {
		if j.GPUs > most {
			return fmt.Errorf("%s: %s has pods of %d GPUs, but the largest node has %d", t.File, j.Name, j.GPUs, most)
		}
		if _, ok := m.CommShare[j.GPUs]; !ok && j.RDMA {
			return fmt.Errorf("%s: %s has pods of %d GPUs, for which the time model has no commShare", t.File, j.Name, j.GPUs)
		}
		if j.VF && !vfs {
			return fmt.Errorf("%s: %s takes SR-IOV VFs, but no node of the cluster has them (machine h20-3e-8gpu-11nic-sriov has)", t.File, j.Name)
		}
	}
	return nil
}
