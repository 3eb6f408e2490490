package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/nicaffinity/nicaffinity/internal/sim"
)

// A replay's columns and seeds are independent, so a simulation splits
// into shares that run apart (a Kubernetes Indexed Job's pods, say) and
// merge into the report one process would have printed. A shard file
// carries the flags that chose the replays, so that the merge prepares
// the same plans (Prepare is deterministic) and checks every share is of
// the same simulation.

// shardFormat names the file's format; a merge refuses others.
const shardFormat = "nicaffinity-sim shard v1"

// maxShardFile caps one shard file's size (its results' timelines make
// most of it).
const maxShardFile = 1 << 30

// share is --shard I/N (of 0: no sharding).
type share struct{ index, of int }

func (s share) takes(task int) bool { return s.of == 0 || task%s.of == s.index }

func parseShard(v string) (share, error) {
	if v == "" {
		return share{}, nil
	}
	i, n, ok := strings.Cut(v, "/")
	index, err1 := strconv.Atoi(i)
	of, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || of < 1 || of > maxShards || index < 0 || index >= of {
		return share{}, fmt.Errorf("--shard %q: want I/N with 0 <= I < N <= %d", v, maxShards)
	}
	return share{index, of}, nil
}

// maxShards bounds N: more shares than a simulation has replays run
// nothing.
const maxShards = 10_000

// shardFlags are the flags that choose the replays.
type shardFlags struct {
	Scenarios     []string `json:"scenarios"`
	Cluster       string   `json:"cluster,omitempty"`
	Workload      string   `json:"workload,omitempty"`
	Trace         string   `json:"trace,omitempty"`
	Runs          int      `json:"runs"`
	Columns       []string `json:"columns,omitempty"`
	AlignmentWait string   `json:"alignmentWait,omitempty"`
	DRA           bool     `json:"dra,omitempty"`
	APIServer     bool     `json:"apiServer,omitempty"`
}

func (o *simulateOptions) flags() shardFlags {
	return shardFlags{Scenarios: o.scenarios, Cluster: o.cluster, Workload: o.workload, Trace: o.trace, Runs: o.runs,
		Columns: o.columns, AlignmentWait: o.alignmentWait, DRA: o.dra, APIServer: o.apiServer}
}

type shardFile struct {
	Format  string        `json:"format"`
	Shard   int           `json:"shard"`
	Of      int           `json:"of"`
	Flags   shardFlags    `json:"flags"`
	Results []shardResult `json:"results"`
}

// shardResult is one replay: scenario, run (seed) and column by index.
type shardResult struct {
	Scenario int        `json:"scenario"`
	Run      int        `json:"run"`
	Column   int        `json:"column"`
	Result   sim.Result `json:"result"`
}

func (o *simulateOptions) writeShard(out io.Writer, s share, all [][]*sim.Plan, cols [][]sim.Column, results [][][]sim.Result) error {
	f := shardFile{Format: shardFormat, Shard: s.index, Of: s.of, Flags: o.flags(), Results: []shardResult{}}
	task := 0
	for i, plans := range all {
		for run := range plans {
			for col := range cols[i] {
				if s.takes(task) {
					f.Results = append(f.Results, shardResult{Scenario: i, Run: run, Column: col, Result: results[i][run][col]})
				}
				task++
			}
		}
	}
	enc := json.NewEncoder(out)
	return enc.Encode(f)
}

// mergeShards reads the shard files of one simulation and prints its
// report.
func (o *simulateOptions) mergeShards(files []string, out, progress io.Writer) error {
	if len(files) == 0 {
		return fmt.Errorf("--merge: name the shard files")
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	shards, err := readShards(files)
	if err != nil {
		return err
	}
	fl := shards[0].Flags
	if fl.Runs < 1 || fl.Runs > maxRuns || len(fl.Scenarios) == 0 {
		return fmt.Errorf("--merge: the shards ran %d runs of %d scenarios: want 1 to %d runs of at least one", fl.Runs, len(fl.Scenarios), maxRuns)
	}
	m := *o
	m.scenarios, m.cluster, m.workload, m.trace, m.runs = fl.Scenarios, fl.Cluster, fl.Workload, fl.Trace, fl.Runs
	m.columns, m.alignmentWait, m.dra, m.apiServer = fl.Columns, fl.AlignmentWait, fl.DRA, fl.APIServer
	var scs []sim.Scenario
	for _, name := range m.scenarios {
		sc, ok := sim.Scenarios[name]
		if !ok {
			return fmt.Errorf("--merge: scenario %q is not a bundled one", name)
		}
		scs = append(scs, sc)
	}
	all, allCols, err := m.prepare(scs, io.Discard)
	if err != nil {
		return fmt.Errorf("--merge: preparing the shards' plans again: %w", err)
	}
	results, err := fillResults(files, shards, all, allCols)
	if err != nil {
		return err
	}
	var reports []*sim.Report
	for i, plans := range all {
		rep, err := m.buildReport(plans, allCols[i], results[i], i, len(all) > 1, progress)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	return m.printReports(out, reports)
}

// readShards reads and checks the shard files: one format, one set of
// flags, one N, every share once.
func readShards(files []string) ([]shardFile, error) {
	var shards []shardFile
	for _, name := range files {
		b, err := readCapped(name, maxShardFile)
		if err != nil {
			return nil, fmt.Errorf("--merge: %w", err)
		}
		var f shardFile
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("--merge: %s: not a shard file: %v", name, err)
		}
		if f.Format != shardFormat {
			return nil, fmt.Errorf("--merge: %s: format %q, want %q", name, f.Format, shardFormat)
		}
		if len(shards) > 0 {
			first := shards[0]
			if f.Of != first.Of {
				return nil, fmt.Errorf("--merge: %s is shard %d of %d, %s of %d", name, f.Shard, f.Of, files[0], first.Of)
			}
			if a, b := fmt.Sprintf("%+v", f.Flags), fmt.Sprintf("%+v", first.Flags); a != b {
				return nil, fmt.Errorf("--merge: %s ran with other flags than %s (%s, against %s)", name, files[0], a, b)
			}
		}
		shards = append(shards, f)
	}
	seen := map[int]string{}
	for i, f := range shards {
		if f.Shard < 0 || f.Shard >= f.Of {
			return nil, fmt.Errorf("--merge: %s: shard %d of %d", files[i], f.Shard, f.Of)
		}
		if other, dup := seen[f.Shard]; dup {
			return nil, fmt.Errorf("--merge: %s and %s are both shard %d", other, files[i], f.Shard)
		}
		seen[f.Shard] = files[i]
	}
	if of := shards[0].Of; len(seen) != of {
		var missing []string
		for i := range of {
			if _, ok := seen[i]; !ok {
				missing = append(missing, strconv.Itoa(i))
			}
		}
		return nil, fmt.Errorf("--merge: shards %s of %d are missing", strings.Join(missing, ", "), of)
	}
	return shards, nil
}

// fillResults places every shard's results by scenario, run and column,
// refusing one the flags do not make, one given twice and one missing.
func fillResults(files []string, shards []shardFile, all [][]*sim.Plan, allCols [][]sim.Column) ([][][]sim.Result, error) {
	results := make([][][]sim.Result, len(all))
	filled := make([][][]bool, len(all))
	for i, plans := range all {
		results[i] = make([][]sim.Result, len(plans))
		filled[i] = make([][]bool, len(plans))
		for k := range plans {
			results[i][k] = make([]sim.Result, len(allCols[i]))
			filled[i][k] = make([]bool, len(allCols[i]))
		}
	}
	for i, f := range shards {
		for _, r := range f.Results {
			if r.Scenario < 0 || r.Scenario >= len(all) || r.Run < 0 || r.Run >= len(all[r.Scenario]) || r.Column < 0 || r.Column >= len(allCols[r.Scenario]) {
				return nil, fmt.Errorf("--merge: %s: a result for scenario %d, run %d, column %d, which the flags do not make", files[i], r.Scenario, r.Run, r.Column)
			}
			if filled[r.Scenario][r.Run][r.Column] {
				return nil, fmt.Errorf("--merge: %s: scenario %d, run %d, column %d twice", files[i], r.Scenario, r.Run, r.Column)
			}
			if got, want := r.Result.Column.Name, allCols[r.Scenario][r.Column].Name; got != want {
				return nil, fmt.Errorf("--merge: %s: column %d is %q, the flags make %q", files[i], r.Column, got, want)
			}
			results[r.Scenario][r.Run][r.Column], filled[r.Scenario][r.Run][r.Column] = r.Result, true
		}
	}
	for i, plans := range all {
		for k := range plans {
			if j := slices.Index(filled[i][k], false); j >= 0 {
				return nil, fmt.Errorf("--merge: no shard holds scenario %d, run %d, column %s", i, k, allCols[i][j].Name)
			}
		}
	}
	return results, nil
}
