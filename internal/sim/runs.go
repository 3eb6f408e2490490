package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Stat is one figure over the runs: the median (of an even count, the mean
// of the middle two) and the range.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Runs   int     `json:"runs"`
}

// statOf is the Stat of the values that are numbers; NaN marks a run where
// the figure does not exist (a change against a baseline of zero).
func statOf(values []float64) (Stat, bool) {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Stat{}, false
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: m, Min: v[0], Max: v[len(v)-1], Runs: len(v)}, true
}

// figure is one row of the report: how to read it from a run's result
// (with the run's default-scheduler result as base, nil without one) and
// how to print it.
type figure struct {
	Key, Label string
	Get        func(rep *Report, run int, r, base *Result) float64
	Format     string // for fmt, of the median and the range's ends
	// Section, when set, heads a group of rows starting with this one.
	Section string
}

// change is r's figure against base in percent, NaN where there is no base
// or it is zero.
func change(r, base *Result, f func(*Result) float64) float64 {
	if base == nil || r == base || f(base) == 0 {
		return math.NaN()
	}
	return 100 * (f(r) - f(base)) / f(base)
}

func field(f func(*Result) float64) func(*Report, int, *Result, *Result) float64 {
	return func(_ *Report, _ int, r, _ *Result) float64 { return f(r) }
}

func versus(f func(*Result) float64) func(*Report, int, *Result, *Result) float64 {
	return func(_ *Report, _ int, r, base *Result) float64 { return change(r, base, f) }
}

func jctMean(r *Result) float64  { return r.JCTMeanHours }
func makespan(r *Result) float64 { return r.MakespanHours }
func gpuHLost(r *Result) float64 { return r.GPUHoursLost }

// figures are the report's rows, in order. Keys are the JSON names.
var figures = []figure{
	{Section: "the work", Key: "finished", Label: "jobs finished", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.Finished) })},
	{Key: "givenUp", Label: "jobs given up (maxWait)", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.Jobs - r.Finished) })},
	{Key: "makespanHours", Label: "makespan, h", Format: "%.2f", Get: field(makespan)},
	{Key: "makespanVsDefault", Label: "  vs default-scheduler", Format: "%+.1f%%", Get: versus(makespan)},
	{Key: "jctMeanHours", Label: "job completion time mean, h", Format: "%.2f", Get: field(jctMean)},
	{Key: "jctMeanVsDefault", Label: "  vs default-scheduler", Format: "%+.1f%%", Get: versus(jctMean)},
	{Key: "jctP50Hours", Label: "job completion time p50, h", Format: "%.2f", Get: field(func(r *Result) float64 { return r.JCTP50Hours })},
	{Key: "jctP99Hours", Label: "job completion time p99, h", Format: "%.2f", Get: field(func(r *Result) float64 { return r.JCTP99Hours })},
	{Key: "gpuHoursLost", Label: "GPU-hours lost to misalignment", Format: "%.1f", Get: field(gpuHLost)},
	{Key: "gpuHoursLostVsDefault", Label: "  vs default-scheduler", Format: "%+.0f%%", Get: versus(gpuHLost)},

	{Section: "GPUDirect RDMA", Key: "rdmaJobs", Label: "RDMA jobs", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.RDMAJobs) })},
	{Key: "gpuDirectJobs", Label: "GPUDirect-eligible RDMA jobs", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.GPUDirectJobs) })},
	{Key: "offlineBound", Label: "  offline bound", Format: "%.0f", Get: func(rep *Report, run int, _, _ *Result) float64 { return float64(rep.Bounds[run].Jobs) }},
	{Key: "pairsPIX", Label: "GPU-NIC pairs PIX", Format: "%.0f", Get: pairs("PIX")},
	{Key: "pairsPXB", Label: "GPU-NIC pairs PXB", Format: "%.0f", Get: pairs("PXB")},
	{Key: "pairsPHB", Label: "GPU-NIC pairs PHB", Format: "%.0f", Get: pairs("PHB")},
	{Key: "pairsNODE", Label: "GPU-NIC pairs NODE", Format: "%.0f", Get: pairs("NODE")},
	{Key: "pairsSYS", Label: "GPU-NIC pairs SYS", Format: "%.0f", Get: pairs("SYS")},
	{Key: "pairsUnverified", Label: "GPU-NIC pairs unverified", Format: "%.0f", Get: pairs("unverified")},
	{Key: "plansFollowedPercent", Label: "plans followed", Format: "%.0f%%", Get: field(func(r *Result) float64 {
		if r.Plans == 0 {
			return math.NaN()
		}
		return 100 * float64(r.PlansFollowed) / float64(r.Plans)
	})},

	{Section: "waiting", Key: "refused", Label: "jobs refused at least once", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.Refused) })},
	{Key: "rdmaWaitingHours", Label: "RDMA jobs waiting, h", Format: "%.2f", Get: field(func(r *Result) float64 { return r.Fragmentation.WaitingSeconds / 3600 })},
	{Key: "meanIdleAlignedGPUs", Label: "  aligned GPUs idle (mean)", Format: "%.1f", Get: field(func(r *Result) float64 { return r.Fragmentation.MeanIdleAlignedGPUs })},
	{Key: "heldByNonRDMAGPUHours", Label: "  aligned GPU-h w/o RDMA", Format: "%.1f", Get: field(func(r *Result) float64 { return r.Fragmentation.HeldByNonRDMAGPUSeconds / 3600 })},
	{Key: "bindP50Ms", Label: "scheduler: create to bound p50, ms", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.BindP50Ms) })},
	{Key: "bindP99Ms", Label: "scheduler: create to bound p99, ms", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.BindP99Ms) })},
}

func pairs(level string) func(*Report, int, *Result, *Result) float64 {
	return field(func(r *Result) float64 { return float64(r.PairLevels[level]) })
}

// ColumnSummary is one column's figures over the runs.
type ColumnSummary struct {
	Column  string          `json:"column"`
	Figures map[string]Stat `json:"figures"`
}

// baseIndex is the column the others are compared with: the last on the
// default scheduler (the default-scheduler column; with DRA, the
// unconstrained claims), -1 without one.
func (rep *Report) baseIndex() int {
	for i := len(rep.Columns) - 1; i >= 0; i-- {
		if rep.Columns[i].Scheduler == Schedulers[1] {
			return i
		}
	}
	return -1
}

// baseName is how the report names the base column in labels and the
// verdict.
func (rep *Report) baseName() string {
	if i := rep.baseIndex(); i >= 0 {
		return rep.Columns[i].Name
	}
	return Schedulers[1]
}

// base is the run's result of the base column, if the report has one.
func (rep *Report) base(run int) *Result {
	if i := rep.baseIndex(); i >= 0 {
		return &rep.Runs[run][i]
	}
	return nil
}

// Finish computes the summary over the runs and the verdict.
func (rep *Report) Finish() {
	rep.Summary = nil
	for ci, c := range rep.Columns {
		cs := ColumnSummary{Column: c.Name, Figures: map[string]Stat{}}
		for _, f := range figures {
			var v []float64
			for run := range rep.Runs {
				v = append(v, f.Get(rep, run, &rep.Runs[run][ci], rep.base(run)))
			}
			if s, ok := statOf(v); ok {
				cs.Figures[f.Key] = s
			}
		}
		rep.Summary = append(rep.Summary, cs)
	}
	rep.Verdict = rep.verdict()
}

// verdict names the column that finished the work first: of those that
// gave up the fewest jobs (a job given up is work not done), the one with
// the shortest median makespan.
func (rep *Report) verdict() string {
	if len(rep.Summary) == 0 || len(rep.Runs) == 0 {
		return ""
	}
	order := make([]int, len(rep.Summary))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		fa, fb := rep.Summary[a].Figures, rep.Summary[b].Figures
		if c := cmpFloat(fa["givenUp"].Median, fb["givenUp"].Median); c != 0 {
			return c
		}
		return cmpFloat(fa["makespanHours"].Median, fb["makespanHours"].Median)
	})
	best := order[0]
	w := rep.Summary[best]
	runs := "one run"
	if len(rep.Runs) > 1 {
		runs = fmt.Sprintf("medians of %d runs", len(rep.Runs))
	}
	// A lead inside the runs' spread is no lead: say so first.
	var b strings.Builder
	decided := true
	if len(order) > 1 {
		r := rep.Summary[order[1]]
		ws, rs := w.Figures["makespanHours"], r.Figures["makespanHours"]
		if ws.Runs > 1 && w.Figures["givenUp"].Median == r.Figures["givenUp"].Median && rs.Min <= ws.Max {
			decided = false
			fmt.Fprintf(&b, "No clear winner on makespan: %s's (%.2f h) and %s's (%.2f h) are within the runs' spread of each other. ",
				w.Column, ws.Median, r.Column, rs.Median)
		}
	}
	if decided {
		fmt.Fprintf(&b, "%s finished the work first: makespan %.2f h", w.Column, w.Figures["makespanHours"].Median)
	} else {
		fmt.Fprintf(&b, "%s: makespan %.2f h", w.Column, w.Figures["makespanHours"].Median)
	}
	if s, ok := w.Figures["makespanVsDefault"]; ok {
		than := "the default scheduler's"
		if n := rep.baseName(); n != Schedulers[1] {
			than = n + "'s"
		}
		fmt.Fprintf(&b, ", %.1f%% %s than %s", math.Abs(s.Median), sooner(s.Median), than)
		for i, d := range rep.Summary {
			if g := d.Figures["givenUp"].Median; i == rep.baseIndex() && g > w.Figures["givenUp"].Median {
				fmt.Fprintf(&b, " (which gave up %g jobs)", g)
			}
		}
		if j, ok := w.Figures["jctMeanVsDefault"]; ok {
			fmt.Fprintf(&b, "; mean job completion %.1f%% %s", math.Abs(j.Median), shorter(j.Median))
		}
	}
	fmt.Fprintf(&b, "; %.1f GPU-hours lost to misalignment", w.Figures["gpuHoursLost"].Median)
	for i, s := range rep.Summary {
		if i == rep.baseIndex() && i != best {
			fmt.Fprintf(&b, " against %.1f", s.Figures["gpuHoursLost"].Median)
		}
	}
	fmt.Fprintf(&b, " (%s).", runs)
	var gaveUp []string
	for _, s := range rep.Summary {
		if g := s.Figures["givenUp"].Median; g > 0 {
			gaveUp = append(gaveUp, fmt.Sprintf("%s %g", s.Column, g))
		}
	}
	if len(gaveUp) > 0 {
		fmt.Fprintf(&b, " Jobs given up after maxWait, not run: %s.", strings.Join(gaveUp, ", "))
	}
	return b.String()
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sooner(pct float64) string {
	if pct <= 0 {
		return "sooner"
	}
	return "later"
}

func shorter(pct float64) string {
	if pct <= 0 {
		return "shorter"
	}
	return "longer"
}
