package sim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Row is one line of the report: a label and a cell per column; a row
// with no cells heads a section.
type Row struct {
	Label string
	Cells []string
}

// Cell prints a figure: the median, and the range when the runs differ.
func (f figure) cell(s Stat, ok bool) string {
	if !ok {
		return "-"
	}
	m := fmt.Sprintf(f.Format, s.Median)
	if s.Runs > 1 && s.Min != s.Max {
		return fmt.Sprintf("%s [%s, %s]", m, fmt.Sprintf(f.Format, s.Min), fmt.Sprintf(f.Format, s.Max))
	}
	return m
}

// Rows are the report's table, the same for the terminal and the HTML page.
func (rep *Report) Rows() []Row {
	var rows []Row
	for _, f := range figures {
		if f.Jobs && !rep.hasMultiPodJobs() {
			continue
		}
		if f.Section != "" {
			rows = append(rows, Row{Label: f.Section + ":"})
		}
		r := Row{Label: strings.Replace(f.Label, Schedulers[1], rep.baseName(), 1)}
		for _, cs := range rep.Summary {
			s, ok := cs.Figures[f.Key]
			r.Cells = append(r.Cells, f.cell(s, ok))
		}
		rows = append(rows, r)
	}
	return rows
}

// hasMultiPodJobs reports whether some run has a job of several pods.
func (rep *Report) hasMultiPodJobs() bool {
	for _, cs := range rep.Summary {
		if cs.Figures["multiPodJobs"].Max > 0 {
			return true
		}
	}
	return false
}

// labelWidth and the cell width (at least minCell, else the widest cell
// plus two) lay out the terminal table.
const (
	labelWidth = 32
	minCell    = 20
)

// Format prints the table and the verdict.
func (rep *Report) Format(w io.Writer) {
	fmt.Fprint(w, rep.header())
	if len(rep.Runs) > 1 {
		fmt.Fprintf(w, "Each cell: the median of %d runs (seeds %d-%d) [lowest, highest].\n", len(rep.Runs), rep.Seeds[0], rep.Seeds[len(rep.Seeds)-1])
	}
	fmt.Fprintln(w)
	rows := rep.Rows()
	width := minCell
	for _, r := range rows {
		for _, c := range r.Cells {
			width = max(width, len(c)+2)
		}
	}
	for _, c := range rep.Columns {
		width = max(width, len(c.Name)+2)
	}
	fmt.Fprintf(w, "%-*s", labelWidth, "")
	for _, c := range rep.Columns {
		fmt.Fprintf(w, "%*s", width, c.Name)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s", labelWidth, r.Label)
		for _, c := range r.Cells {
			fmt.Fprintf(w, "%*s", width, c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n%s\n", rep.Verdict)
	if r := rep.Replay; r != nil {
		fmt.Fprintf(w, "\nReplayed %d pods in %.0f s on the %s API, %.0f pods a second (wall clock: the machine's speed, not the workload's).\n", r.Pods, r.Seconds, r.API, r.PodsPerSecond)
	}
}

// header is the report's first line: the cluster, the work and the clock.
func (rep *Report) header() string {
	arrival := "arriving over time"
	if rep.Workload.Arrival == ArrivalBacklog {
		arrival = "all waiting at the start"
	}
	return fmt.Sprintf("%d nodes, %d GPUs (%d next to a NIC at PIX/PXB), %d jobs %s; times in hours of workload time on the replay's virtual clock (scheduler latencies: real ms).\n",
		rep.Nodes, rep.GPUs, rep.AlignedGPUs, rep.Workload.Jobs, arrival)
}

// JSON prints the report for machines.
func (rep *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHTML writes dir/index.html: the table and, per scheduler, a chart
// of the GPUs in use by level over time. It needs no network: the charts
// are inline SVG.
func (rep *Report) WriteHTML(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "index.html")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := rep.HTML(f); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// Chart geometry.
const (
	chartW, chartH     = 760, 240
	padLeft, padBottom = 48, 28
	padTop, padRight   = 10, 12
)

var seriesColor = map[string]string{
	"PIX": "#1a9850", "PXB": "#91cf60", "PHB": "#fee08b", "NODE": "#fc8d59",
	"SYS": "#d73027", "unverified": "#bdbdbd", "noRDMA": "#4575b4",
}

type chartArea struct {
	Series, Color, Points string
	Total                 int
}

type chartTick struct {
	X, Y  float64
	Label string
}

type chart struct {
	Scheduler string
	W, H      int
	Areas     []chartArea
	XTicks    []chartTick
	YTicks    []chartTick
	// AlignedY is where the line of aligned GPUs (the GPUDirect-capable
	// capacity) sits.
	AlignedY       float64
	X0, X1, Y0, Y1 float64
}

// charts draw the first run.
func (rep *Report) charts() []chart {
	if len(rep.Runs) == 0 {
		return nil
	}
	results := rep.Runs[0]
	maxT := 1.0
	for _, r := range results {
		maxT = max(maxT, workEnd(r))
	}
	unit, per := "s", 1.0
	switch {
	case maxT >= 2*3600:
		unit, per = "h", 3600
	case maxT >= 120:
		unit, per = "min", 60
	}
	maxY := float64(max(rep.GPUs, 1))
	x := func(t float64) float64 { return padLeft + t/maxT*float64(chartW-padLeft-padRight) }
	y := func(g float64) float64 { return float64(chartH-padBottom) - g/maxY*float64(chartH-padBottom-padTop) }
	var out []chart
	for _, r := range results {
		c := chart{Scheduler: r.Scheduler, W: chartW, H: chartH, AlignedY: y(float64(rep.AlignedGPUs)),
			X0: padLeft, X1: chartW - padRight, Y0: float64(chartH - padBottom), Y1: padTop}
		below := make([]int, len(r.Timeline))
		for _, s := range Series {
			var top, bottom []string
			total := 0
			for i, smp := range r.Timeline {
				n := smp.GPUs[s]
				total += n
				top = append(top, fmt.Sprintf("%.1f,%.1f", x(smp.T), y(float64(below[i]+n))))
				bottom = append(bottom, fmt.Sprintf("%.1f,%.1f", x(smp.T), y(float64(below[i]))))
				below[i] += n
			}
			if total == 0 {
				continue
			}
			for i, j := 0, len(bottom)-1; i < j; i, j = i+1, j-1 {
				bottom[i], bottom[j] = bottom[j], bottom[i]
			}
			c.Areas = append(c.Areas, chartArea{Series: s, Color: seriesColor[s], Points: strings.Join(append(top, bottom...), " "), Total: total})
		}
		for i := 0; i <= 5; i++ {
			t := maxT * float64(i) / 5
			c.XTicks = append(c.XTicks, chartTick{X: x(t), Y: float64(chartH - padBottom + 16), Label: fmt.Sprintf("%.1f %s", t/per, unit)})
			g := maxY * float64(i) / 5
			c.YTicks = append(c.YTicks, chartTick{X: padLeft - 6, Y: y(g) + 4, Label: fmt.Sprintf("%.0f", g)})
		}
		out = append(out, c)
	}
	return out
}

// workEnd is when a run's work ended: the first sample after the last one
// with a GPU in use or a job waiting. A run lasts until its last event,
// which may be a job given up hours after the work (maxWait: 168 h for a
// trace); a chart to there would squeeze the work into its left edge.
func workEnd(r Result) float64 {
	end := 0.0
	for i, s := range r.Timeline {
		busy := s.Waiting > 0
		for _, n := range s.GPUs {
			busy = busy || n > 0
		}
		if !busy {
			continue
		}
		end = s.T
		if i+1 < len(r.Timeline) {
			end = r.Timeline[i+1].T
		}
	}
	if end == 0 {
		return r.Seconds
	}
	return end
}

type legendItem struct{ Series, Color, Meaning string }

var legend = []legendItem{
	{"PIX", seriesColor["PIX"], "GPU and NIC under one PCIe switch: GPUDirect RDMA"},
	{"PXB", seriesColor["PXB"], "through several switches, no host bridge: GPUDirect RDMA"},
	{"PHB", seriesColor["PHB"], "through the CPU's host bridge: no GPUDirect"},
	{"NODE", seriesColor["NODE"], "across host bridges of one NUMA node"},
	{"SYS", seriesColor["SYS"], "across the inter-socket link"},
	{"unverified", seriesColor["unverified"], "RDMA job the exporter had not yet checked"},
	{"noRDMA", seriesColor["noRDMA"], "job without a NIC"},
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>nicaffinity-sim simulate</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:62em;color:#222}
table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:right}td:first-child,th:first-child{text-align:left}
tr:nth-child(even){background:#f4f4f4}svg text{font-size:11px;fill:#444}.sw{display:inline-block;width:1em;height:1em;vertical-align:middle;margin-right:.3em}
</style></head><body>
<h1>nicaffinity-sim simulate</h1>
<p id="verdict"><strong>{{.Report.Verdict}}</strong></p>
<p>{{.Header}} The same workload is replayed through each column on a fresh cluster{{if gt (len .Report.Runs) 1}},
once per seed ({{len .Report.Runs}} runs); each cell is the median [lowest, highest]{{end}}.
The bound is the most RDMA jobs any schedule, delays allowed, could make GPUDirect-eligible.</p>
<table id="summary"><tr><th></th>{{range .Report.Columns}}<th>{{.Name}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Label}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<h2>GPUs in use by GPU-NIC level over time (first run)</h2>
<p>{{range .Legend}}<span class="sw" style="background:{{.Color}}"></span>{{.Series}}: {{.Meaning}}<br>{{end}}
The dashed line is the number of GPUs with a PIX/PXB NIC.</p>
{{range .Charts}}<h3>{{.Scheduler}}</h3>
<svg class="chart" data-scheduler="{{.Scheduler}}" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" xmlns="http://www.w3.org/2000/svg">
{{range .Areas}}<polygon data-series="{{.Series}}" data-gpu-samples="{{.Total}}" fill="{{.Color}}" points="{{.Points}}"/>
{{end}}<line x1="{{.X0}}" y1="{{.Y0}}" x2="{{.X1}}" y2="{{.Y0}}" stroke="#444"/>
<line x1="{{.X0}}" y1="{{.Y0}}" x2="{{.X0}}" y2="{{.Y1}}" stroke="#444"/>
<line x1="{{.X0}}" y1="{{.AlignedY}}" x2="{{.X1}}" y2="{{.AlignedY}}" stroke="#000" stroke-dasharray="4 3"/>
{{range .XTicks}}<text x="{{.X}}" y="{{.Y}}" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .YTicks}}<text x="{{.X}}" y="{{.Y}}" text-anchor="end">{{.Label}}</text>
{{end}}</svg>
{{end}}</body></html>
`))

// HTML writes the page.
func (rep *Report) HTML(w io.Writer) error {
	return page.Execute(w, map[string]any{"Report": rep, "Header": rep.header(), "Rows": rep.Rows(), "Charts": rep.charts(), "Legend": legend})
}
