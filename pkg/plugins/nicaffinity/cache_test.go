package nicaffinity

// These tests build under -race (make test): the cache is where the
// plugin's concurrency lives. They read views as Filter and Score do,
// without the framework's NodeInfo and CycleState (framework_test.go says
// why those stay out of the race build).

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// TestCacheConcurrent drives the store as the scheduler does: readers take
// views and answer from them as Filter, Score and Reserve's planning do,
// from many goroutines, while Reserve, Unreserve, object updates and pod
// deletions write, and every view built gets the plugin's precomputed
// answers (go test -race checks it).
func TestCacheConcurrent(t *testing.T) {
	pl, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7))
	req, ok, err := pl.podRequest(makePod("reader", 1, nil, rdma, "1"))
	if err != nil || !ok {
		t.Fatalf("podRequest: %v %v", ok, err)
	}
	li := placement.LevelIndex(req.MaxLevel)
	done := make(chan struct{})
	// The writers start once every reader has read a view, so reads and
	// writes overlap even when the machine is busy.
	var wg, reading sync.WaitGroup
	const readers = 8
	reading.Add(readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for {
				select {
				case <-done:
					return
				default:
				}
				v, _ := st.View("n")
				if v == nil {
					continue
				}
				if a, ok := v.commonAnswer(req); !ok || a.feasible != v.fits(req, li) {
					t.Errorf("precomputed answer %+v (ok %v) differs from the search", a, ok)
					if first {
						reading.Done()
					}
					return
				}
				_ = pl.scoreOf(v, req)
				_ = v.Plan(req, li)
				if first {
					first = false
					reading.Done()
				}
			}
		}()
	}
	reading.Wait()
	for i := 0; i < 200; i++ {
		uid := types.UID(fmt.Sprint("p", i))
		st.Reserve("n", uid, nrt.GPUSet(1)<<(i%8), nil)
		c, err := nrt.Compile(handNRT("n", 0, 1, 2, 3), "nvidia.com/gpu")
		var counted map[types.UID]bool
		if i%3 == 0 {
			counted = map[types.UID]bool{uid: true}
		}
		st.set("n", "", c, err, counted)
		st.Unreserve("n", uid)
		st.forgetPod(uid)
	}
	close(done)
	wg.Wait()
}

// TestStoreLifecycle follows one node through the store's writers and checks
// what View publishes after each, and that the pod index forgets pods.
func TestStoreLifecycle(t *testing.T) {
	st := newCache(storeConfig{timeout: time.Minute, gpuResource: "nvidia.com/gpu", profile: testProfile})
	if v, why := st.View("n"); v != nil || why != "no NodeResourceTopology for this node" {
		t.Errorf("unknown node: %v %q", v, why)
	}
	st.Reserve("ghost", "pod-g", 1, nil) // a node whose object has not come yet
	if v, why := st.View("ghost"); v != nil || why != "no NodeResourceTopology for this node" {
		t.Errorf("reservation on a node without an object: %v %q", v, why)
	}
	st.Unreserve("ghost", "pod-g")
	obj := handNRT("n", 0, 1, 2, 3)
	c, err := nrt.Compile(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	st.set("n", "", c, nil, nil)
	v, _ := st.View("n")
	if v == nil || v.Free != c.Free {
		t.Fatalf("after set: %+v", v)
	}
	st.Reserve("n", "pod-a", 1, nil)
	if v, _ := st.View("n"); v.Free != c.Free&^1 || !v.stale {
		t.Errorf("after Reserve: free %b stale %v", v.Free, v.stale)
	}
	st.forgetPod("pod-a")
	if v, _ := st.View("n"); v.Free != c.Free || len(st.podNode) != 0 {
		t.Errorf("after forgetPod: free %b, index %v", v.Free, st.podNode)
	}
	st.Reserve("n", "pod-b", 2, nil)
	st.Reserve("n", "pod-c", 4, nil)                           // reserved, not yet seen bound
	st.set("n", "", c, nil, map[types.UID]bool{"pod-b": true}) // the object counts pod-b now
	if v, _ := st.View("n"); v.Free != c.Free&^4 || !v.stale || len(st.podNode) != 1 {
		t.Errorf("after an object that counts pod-b: free %b, stale %v, index %v; want pod-c still held", v.Free, v.stale, st.podNode)
	}
	st.set("n", "", c, nil, map[types.UID]bool{"pod-c": true})
	if v, _ := st.View("n"); v.stale || len(st.podNode) != 0 {
		t.Errorf("after a confirming object: stale %v, index %v", v.stale, st.podNode)
	}
	st.set("n", "", nil, errors.New("garbled"), nil)
	if v, why := st.View("n"); v != nil || why != "NodeResourceTopology cannot be read: garbled" {
		t.Errorf("garbled object: %v %q", v, why)
	}
	st.set("n", "", c, nil, nil)
	st.remove("n")
	if v, why := st.View("n"); v != nil || why != "no NodeResourceTopology for this node" {
		t.Errorf("removed object: %v %q", v, why)
	}
}

// TestDecodeArgs: args arrive as the profile's raw JSON (or YAML); a
// misspelt field is an error that names it, not a silent default.
func TestDecodeArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     runtime.Object
		want    func(*Args) bool
		wantErr string
	}{
		{name: "none", obj: nil, want: func(a *Args) bool { return a.DefaultMaxLevel == "P2C" }},
		{name: "JSON", obj: &runtime.Unknown{Raw: []byte(`{"defaultMaxLevel":"PIX","defaultPolicy":"preferred"}`), ContentType: runtime.ContentTypeJSON},
			want: func(a *Args) bool { return a.DefaultMaxLevel == "PIX" && a.DefaultPolicy == "preferred" }},
		{name: "YAML", obj: &runtime.Unknown{Raw: []byte("defaultMaxLevel: PHB\n"), ContentType: runtime.ContentTypeYAML},
			want: func(a *Args) bool { return a.DefaultMaxLevel == "PHB" }},
		{name: "misspelt field", obj: &runtime.Unknown{Raw: []byte(`{"defaultMaxLvl":"PIX"}`)}, wantErr: `unknown field "defaultMaxLvl"`},
		{name: "invalid value", obj: &runtime.Unknown{Raw: []byte(`{"defaultMaxLevel":"NEAR"}`)}, wantErr: "defaultMaxLevel"},
		{name: "protobuf", obj: &runtime.Unknown{Raw: []byte{1}, ContentType: runtime.ContentTypeProtobuf}, wantErr: "want JSON or YAML"},
		{name: "another type", obj: &metav1.Status{}, wantErr: "got *v1.Status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseArgs(tc.obj)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), Name+" args") {
					t.Fatalf("err = %v, want one naming the plugin's args and containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.want(a) {
				t.Errorf("ParseArgs = %+v, %v", a, err)
			}
		})
	}
}

// TestJobRailsCaps: each namespace holds at most maxNamespaceJobs jobs,
// and one namespace at its cap neither evicts nor blocks another's jobs
// (finding 4 of the round-4 audit: the cap was shared); a job holds at
// most maxJobPods pods and maxJobRails rails; a job goes with its last
// pod, its rails are the union of its pods', and a pod moving jobs leaves
// the old one.
func TestJobRailsCaps(t *testing.T) {
	j := newJobRails()
	for i := 0; i < maxNamespaceJobs+5; i++ {
		j.add(fmt.Sprintf("greedy/job-%d", i), types.UID(fmt.Sprint("p", i)), []string{"0"})
	}
	if jobs, pods := j.size(); jobs != maxNamespaceJobs || pods != maxNamespaceJobs {
		t.Fatalf("%d jobs, %d pods; want %d of each", jobs, pods, maxNamespaceJobs)
	}
	if j.rails(fmt.Sprintf("greedy/job-%d", maxNamespaceJobs)) != nil {
		t.Error("a job past its namespace's cap has rails")
	}
	j.add("honest/train", "h1", []string{"3"})
	if diff := cmp.Diff([]string{"3"}, j.rails("honest/train")); diff != "" {
		t.Errorf("another namespace's job beside a full one (-want,+got):\n%s", diff)
	}
	if j.rails("greedy/job-0") == nil {
		t.Error("a job of the full namespace was evicted")
	}
	j.drop("p0")
	j.add("greedy/late", "late", []string{"1"})
	if got := j.rails("greedy/late"); len(got) != 1 {
		t.Errorf("a job after one went: rails %v", got)
	}
	j = newJobRails()
	for i := 0; i < maxJobPods+5; i++ {
		j.add("ns/big", types.UID(fmt.Sprint("b", i)), []string{fmt.Sprint(i % 3)})
	}
	if _, pods := j.size(); pods != maxJobPods {
		t.Errorf("%d pods tracked, want %d", pods, maxJobPods)
	}
	if diff := cmp.Diff([]string{"0", "1", "2"}, j.rails("ns/big")); diff != "" {
		t.Errorf("union (-want,+got):\n%s", diff)
	}
	j.add("ns/other", "b0", []string{"7"})
	if got := j.rails("ns/other"); len(got) != 1 {
		t.Errorf("moved pod: %v", got)
	}
	j = newJobRails()
	many := make([]string, 2048)
	for i := range many {
		many[i] = fmt.Sprintf("r%04d", i)
	}
	j.add("ns/wide", "w", many)
	if got := len(j.rails("ns/wide")); got != maxJobRails {
		t.Errorf("a pod naming 2048 rails: the job holds %d, want the cap %d", got, maxJobRails)
	}
	j.drop("w")
	if j.rails("ns/wide") != nil {
		t.Error("the job outlived its last pod")
	}
	j.add("ns/x", "none", nil)
	j.add("", "anon", []string{"1"})
	if j.rails("ns/x") != nil || j.rails("") != nil {
		t.Error("a pod without rails or without a job was tracked")
	}
}

// BenchmarkJobRailsAtCaps: a pod joining a job at its caps (maxJobPods
// pods, maxJobRails rails) with a plan naming 2048 rails: one add and one
// drop per op. The audit measured 8-19 ms per add with 2048 rails before
// the union was counted; the goal is under 1 ms.
func BenchmarkJobRailsAtCaps(b *testing.B) {
	j := newJobRails()
	for i := range maxJobPods - 1 {
		j.add("ns/big", types.UID(fmt.Sprint("p", i)), []string{fmt.Sprintf("r%02d", i%maxJobRails)})
	}
	hostile := make([]string, 2048)
	for i := range hostile {
		hostile[i] = fmt.Sprintf("h%04d", i)
	}
	for b.Loop() {
		j.add("ns/big", "x", hostile)
		j.drop("x")
	}
}

// BenchmarkColdStart: a cache learning of every node's object at start, as
// a scheduler does when it starts or takes the lease over. Its cost per
// node must not grow with the nodes already known (compare the sizes: a
// cost linear in the nodes gives four times the time for four times the
// nodes).
func BenchmarkColdStart(b *testing.B) {
	for _, nodes := range []int{5000, 20000} {
		b.Run(fmt.Sprint(nodes), func(b *testing.B) {
			obj := handNRT("n", 0, 1, 2, 3, 4, 5, 6, 7)
			compiled, err := nrt.Compile(obj, "nvidia.com/gpu")
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, nodes)
			for i := range names {
				names[i] = fmt.Sprintf("node-%05d", i)
			}
			b.ResetTimer()
			for b.Loop() {
				_, st := newTestPlugin(b, nil)
				for _, n := range names {
					st.set(n, "1", compiled, nil, nil)
				}
			}
		})
	}
}
