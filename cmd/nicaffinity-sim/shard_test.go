package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func simulate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"simulate"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// wallClock are the report's keys that the machine sets, not the workload.
var wallClock = regexp.MustCompile(`(?i)latency|Ms$|^seconds$|^replay$`)

func withoutWallClock(t *testing.T, report string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(report), &v); err != nil {
		t.Fatalf("%v: %s", err, report)
	}
	var strip func(any) any
	strip = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k := range x {
				if wallClock.MatchString(k) {
					delete(x, k)
				} else {
					x[k] = strip(x[k])
				}
			}
		case []any:
			for i := range x {
				x[i] = strip(x[i])
			}
		}
		return v
	}
	return strip(v)
}

// TestShardsMergeToOneReport: three shards of two runs of three columns,
// merged, make the report one process makes; merges of a wrong set of
// files are refused with what is wrong.
func TestShardsMergeToOneReport(t *testing.T) {
	args := []string{"--scenario", "default", "--runs", "2", "--columns", "bounded+proxy,preferred+proxy,default-scheduler", "-o", "json"}
	whole, err := simulate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []string
	for i := range 3 {
		out, err := simulate(t, append(args, "--shard", []string{"0/3", "1/3", "2/3"}[i])...)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, []string{"a.json", "b.json", "c.json"}[i])
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	merged, err := simulate(t, append([]string{"--merge", "-o", "json"}, files...)...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(withoutWallClock(t, whole), withoutWallClock(t, merged)); diff != "" {
		t.Errorf("one process (-) and three shards merged (+):\n%s", diff)
	}

	// The comparison can fail: one result changed in one shard shows.
	var tampered shardFile
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tampered); err != nil || len(tampered.Results) == 0 {
		t.Fatalf("shard 1: %v, %d results", err, len(tampered.Results))
	}
	tampered.Results[0].Result.GPUHoursLost += 1
	b, _ = json.Marshal(tampered)
	tamperedFile := filepath.Join(dir, "tampered.json")
	if err := os.WriteFile(tamperedFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if merged, err := simulate(t, "--merge", "-o", "json", files[0], tamperedFile, files[2]); err != nil {
		t.Fatal(err)
	} else if cmp.Equal(withoutWallClock(t, whole), withoutWallClock(t, merged)) {
		t.Errorf("a merge with a tampered result equals the whole run's report")
	}

	other, err := simulate(t, "--scenario", "default", "--runs", "1", "--columns", "default-scheduler", "--shard", "0/3")
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(dir, "other.json")
	garbled := filepath.Join(dir, "garbled.json")
	for f, text := range map[string]string{otherFile: other, garbled: `{"format": "nicaffinity-sim shard v1", "shard": `} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{files[:2], "shards 2 of 3 are missing"},
		{[]string{files[0], files[0], files[1]}, "are both shard 0"},
		{[]string{files[0], files[1], otherFile}, "ran with other flags"},
		{[]string{garbled}, "garbled.json: not a shard file"},
		{nil, "--merge: name the shard files"},
	} {
		if _, err := simulate(t, append([]string{"--merge"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("merge %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, bad := range []string{"3/3", "x/2", "1", "0/0", "-1/2"} {
		if _, err := simulate(t, "--shard", bad); err == nil || !strings.Contains(err.Error(), "--shard") {
			t.Errorf("--shard %s: %v, want it refused", bad, err)
		}
	}
}
