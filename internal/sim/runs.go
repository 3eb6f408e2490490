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
	// Jobs marks the rows about multi-pod jobs, which the table leaves out
	// when the workload has none (the JSON keeps them).
	Jobs bool
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
	{Key: "bound", Label: "  bound (delays allowed)", Format: "%.0f", Get: func(rep *Report, run int, _, _ *Result) float64 { return float64(rep.Bounds[run].Jobs) }},
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

	{Section: "jobs of several pods", Key: "multiPodJobs", Label: "multi-pod jobs", Format: "%.0f", Jobs: true, Get: field(func(r *Result) float64 { return float64(r.MultiPodJobs) })},
	{Key: "railAlignedJobs", Label: "  aligned, on one rail set", Format: "%.0f", Jobs: true, Get: field(func(r *Result) float64 { return float64(r.RailAlignedJobs) })},
	{Key: "splitRailAvoidable", Label: "  split rails, avoidably", Format: "%.0f", Jobs: true, Get: field(func(r *Result) float64 { return float64(r.SplitRailAvoidable) })},
	{Key: "gangWaitHours", Label: "  GPU-h held before whole", Format: "%.1f", Jobs: true, Get: field(func(r *Result) float64 { return r.GangWaitHours })},

	{Section: "waiting", Key: "refused", Label: "jobs refused at least once", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.Refused) })},
	{Key: "rdmaWaitingHours", Label: "RDMA jobs waiting, h", Format: "%.2f", Get: field(func(r *Result) float64 { return r.Fragmentation.WaitingSeconds / 3600 })},
	{Key: "meanIdleAlignedGPUs", Label: "  aligned GPUs idle (mean)", Format: "%.1f", Get: field(func(r *Result) float64 { return r.Fragmentation.MeanIdleAlignedGPUs })},
	{Key: "heldByNonRDMAGPUHours", Label: "  aligned GPU-h w/o RDMA", Format: "%.1f", Get: field(func(r *Result) float64 { return r.Fragmentation.HeldByNonRDMAGPUSeconds / 3600 })},

	// Wall clock, apart: every figure above is workload time.
	{Section: "scheduler latency (wall clock, not workload time)", Key: "bindP50Ms", Label: "create to bound p50, real ms", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.BindP50Ms) })},
	{Key: "bindP99Ms", Label: "create to bound p99, real ms", Format: "%.0f", Get: field(func(r *Result) float64 { return float64(r.BindP99Ms) })},
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

// verdict answers "how much sooner": the figure that decides is makespan
// when the jobs wait from the start (the backlog: how fast the cluster gets
// through the same work), and mean job completion time when they arrive
// over time (makespan is set by the last arrivals there). Of the columns
// that gave up the fewest jobs (a job given up is work not done), the best
// on that figure is compared with the default scheduler's column run by
// run; when that change takes both signs over the runs, the spread decides
// nothing and the verdict says so.
func (rep *Report) verdict() string {
	if len(rep.Summary) == 0 || len(rep.Runs) == 0 {
		return ""
	}
	key, vs, name := "jctMeanHours", "jctMeanVsDefault", "mean job completion time"
	why := "the jobs arrive over time, so makespan is set by the last arrivals"
	if rep.Workload.Arrival == ArrivalBacklog {
		key, vs, name = "makespanHours", "makespanVsDefault", "makespan"
		why = "every job waits from the start, so makespan is how fast the cluster gets through the work"
	}
	base := rep.baseIndex()
	// The candidate is the best column but the default scheduler's: of
	// those that gave up the fewest jobs, the best on the deciding figure.
	order := make([]int, 0, len(rep.Summary))
	for i := range rep.Summary {
		if i != base {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		order = append(order, base)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		fa, fb := rep.Summary[a].Figures, rep.Summary[b].Figures
		if c := cmpFloat(fa["givenUp"].Median, fb["givenUp"].Median); c != 0 {
			return c
		}
		return cmpFloat(fa[key].Median, fb[key].Median)
	})
	best := rep.Summary[order[0]]
	runs := "one run: no spread to judge it by"
	if len(rep.Runs) > 1 {
		runs = fmt.Sprintf("medians of %d runs", len(rep.Runs))
	}
	var b strings.Builder
	ch, compared := best.Figures[vs]
	verb := "finishes the same work"
	if key == "jctMeanHours" {
		verb = "completes jobs"
	}
	spread := ""
	if ch.Runs > 1 {
		spread = fmt.Sprintf(" [%+.1f%%, %+.1f%% over the runs]", ch.Min, ch.Max)
	}
	switch {
	case base < 0 || order[0] == base || !compared:
		fmt.Fprintf(&b, "%s did best on %s: %.2f h", best.Column, name, best.Figures[key].Median)
	case ch.Runs > 1 && ch.Min < 0 && ch.Max > 0, ch.Median == 0:
		fmt.Fprintf(&b, "No clear difference: %s's %s is %.1f%% %s than %s's at the median, but shorter in some runs and longer in others%s",
			best.Column, name, math.Abs(ch.Median), shorter(ch.Median), rep.baseName(), spread)
	case ch.Median > 0:
		fmt.Fprintf(&b, "No column %s sooner than %s: the best, %s, is %.1f%% later%s (%s %.2f h against %.2f h)",
			verb, rep.baseName(), best.Column, ch.Median, spread, name, best.Figures[key].Median, rep.Summary[base].Figures[key].Median)
	default:
		fmt.Fprintf(&b, "%s %s %.1f%% sooner than %s%s (%s %.2f h against %.2f h)", best.Column, verb, -ch.Median, rep.baseName(), spread,
			name, best.Figures[key].Median, rep.Summary[base].Figures[key].Median)
	}
	other := "makespanVsDefault"
	if key == "makespanHours" {
		other = "jctMeanVsDefault"
	}
	if s, ok := best.Figures[other]; ok && base >= 0 && order[0] != base {
		label := "makespan"
		if other == "jctMeanVsDefault" {
			label = "mean job completion"
		}
		fmt.Fprintf(&b, "; %s %.1f%% %s", label, math.Abs(s.Median), shorter(s.Median))
	}
	fmt.Fprintf(&b, "; %.1f GPU-hours lost to misalignment", best.Figures["gpuHoursLost"].Median)
	if base >= 0 && order[0] != base {
		fmt.Fprintf(&b, " against %.1f", rep.Summary[base].Figures["gpuHoursLost"].Median)
	}
	fmt.Fprintf(&b, " (%s). Decided by %s: %s.", runs, name, why)
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
