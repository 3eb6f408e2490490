package nicaffinity

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// jobRails is the part of the store that knows which rails each multi-pod
// job's pods use, so that the job's next pod can be placed on the same
// rails. It holds plain values: the plugin's Reserve and Unreserve, and
// the informer edge for pods bound with a plan, tell it which pod of which
// job holds which rails.
//
// Invariants:
//   - jobs are keyed namespace/name (request.Job.Key): a pod can only ever
//     join, steer or stall a job of its own namespace;
//   - a job's rails are the union of its pods' rails (counted, so a change
//     costs the pod's rails, not the job's), sorted, replaced whole on
//     every change, so a reader's slice never changes under it;
//   - a job goes when its last pod goes. Each namespace has at most
//     maxNamespaceJobs jobs, a job maxJobPods pods and maxJobRails rails;
//     past a cap, the namespace's further jobs (or the job's further pods,
//     or rails) are not recorded and are placed as jobs of one: a tenant
//     creating jobs without end fills its own share only, and no
//     namespace's jobs can evict or block another's. maxJobs bounds the
//     whole store as the last line (a cluster of more than maxJobs /
//     maxNamespaceJobs busy namespaces).
type jobRails struct {
	mu    sync.Mutex
	jobs  map[string]*jobEntry
	podOf map[types.UID]string
	// perNS counts each namespace's jobs.
	perNS map[string]int
	// full is logged once per namespace per time its cap is reached.
	full map[string]bool
}

type jobEntry struct {
	pods map[types.UID][]string
	// count is how many of the job's pods hold each rail.
	count map[string]int
	rails []string
}

// Caps of the job store.
const (
	maxJobs          = 100_000
	maxNamespaceJobs = 2_000
	maxJobPods       = 10_000
	// maxJobRails bounds a job's rails: a rail-optimized fabric has one
	// rail per NIC of a node (8, 16 at most today).
	maxJobRails = 64
)

func newJobRails() *jobRails {
	return &jobRails{jobs: map[string]*jobEntry{}, podOf: map[types.UID]string{}, perNS: map[string]int{}, full: map[string]bool{}}
}

// rails is the union of the rails job's pods hold (nil for none).
func (j *jobRails) rails(job string) []string {
	if job == "" {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if e := j.jobs[job]; e != nil {
		return e.rails
	}
	return nil
}

// namespaceOf is the namespace of a job key (namespace/name).
func namespaceOf(job string) string {
	ns, _, _ := strings.Cut(job, "/")
	return ns
}

// add records that pod of job holds rails (a pod of no job, or one whose
// plan names no rail, is not recorded). Its cost grows with the pod's
// rails and the job's (at most maxJobRails), never with the job's pods.
func (j *jobRails) add(job string, pod types.UID, rails []string) {
	if job == "" || len(rails) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if prev, ok := j.podOf[pod]; ok && prev != job {
		j.dropLocked(pod)
	}
	e := j.jobs[job]
	if e == nil {
		ns := namespaceOf(job)
		if j.perNS[ns] >= maxNamespaceJobs || len(j.jobs) >= maxJobs {
			if !j.full[ns] {
				klog.InfoS("Job rails store is full for this namespace; pods of its further jobs are placed without their job's rails", "namespace", ns, "jobs", j.perNS[ns])
				j.full[ns] = true
			}
			return
		}
		e = &jobEntry{pods: map[types.UID][]string{}, count: map[string]int{}}
		j.jobs[job] = e
		j.perNS[ns]++
	}
	old, had := e.pods[pod]
	if had && slices.Equal(old, rails) {
		return
	}
	if !had && len(e.pods) >= maxJobPods {
		return
	}
	kept := make([]string, 0, min(len(rails), maxJobRails))
	added := 0 // rails new to the job among kept
	for _, r := range rails {
		switch {
		case e.count[r] > 0 || slices.Contains(old, r):
			kept = append(kept, r)
		case len(e.count)+added < maxJobRails:
			kept = append(kept, r)
			added++
		}
	}
	changed := e.release(old)
	for _, r := range kept {
		if e.count[r]++; e.count[r] == 1 {
			changed = true
		}
	}
	e.pods[pod] = kept
	j.podOf[pod] = job
	if changed {
		e.rails = slices.Sorted(maps.Keys(e.count))
	}
}

// release uncounts a pod's rails and reports whether a rail went.
func (e *jobEntry) release(rails []string) bool {
	gone := false
	for _, r := range rails {
		if e.count[r]--; e.count[r] <= 0 {
			delete(e.count, r)
			gone = true
		}
	}
	return gone
}

// drop forgets pod; its job goes with its last pod.
func (j *jobRails) drop(pod types.UID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropLocked(pod)
}

func (j *jobRails) dropLocked(pod types.UID) {
	job, ok := j.podOf[pod]
	if !ok {
		return
	}
	delete(j.podOf, pod)
	e := j.jobs[job]
	gone := e.release(e.pods[pod])
	delete(e.pods, pod)
	if len(e.pods) == 0 {
		delete(j.jobs, job)
		ns := namespaceOf(job)
		if j.perNS[ns]--; j.perNS[ns] <= 0 {
			delete(j.perNS, ns)
		}
		delete(j.full, ns)
		return
	}
	if gone {
		e.rails = slices.Sorted(maps.Keys(e.count))
	}
}

// size is how many jobs and pods the store tracks.
func (j *jobRails) size() (jobs, pods int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.jobs), len(j.podOf)
}

// railRoom is, per rail, how many free GPUs are at level index li or
// closer to a NIC on it, over the usable views of nodes that could take a
// pod of gpus GPUs there at all: where a job placing its first pod has the
// most room for the rest. Only rails enough nodes publish count, and a
// node weighs at most gpus GPUs per rail, one pod's worth, whatever it
// claims (railtrust.go). It runs in Reserve, on the scheduling cycle's
// one thread, once per multi-pod job, so its work is bounded per call: it
// reads at most maxRailRoomNodes views, all of a smaller cluster's and, of
// a larger one, as many as the map's iteration order gives first (a
// sample, as any estimate of where the job's later pods will find room
// can only be).
func (c *Cache) railRoom(li, gpus int) map[string]int {
	counted := c.railsCounted()
	room := map[string]int{}
	read := 0
	node := map[string]int{}
	c.cells.each(func(_ string, cell *atomic.Pointer[nodeView]) bool {
		if read++; read > maxRailRoomNodes {
			return false
		}
		v, _ := usable(cell.Load())
		if v == nil || (v.Free&v.C.AnyNear[li]).Count() < gpus {
			return true
		}
		clear(node)
		for n, nic := range v.C.NICs {
			if counted[nic.Rail] {
				node[nic.Rail] += (v.Free & v.C.Near[li][n]).Count()
			}
		}
		for r, free := range node {
			room[r] += min(free, gpus)
		}
		return true
	})
	return room
}

// maxRailRoomNodes bounds railRoom's reads. A full pass over 5000 nodes in
// every multi-pod job's first Reserve cost the mixed bench's nicaffinity
// profile a third of its throughput (docs/simulate.md, bench); every
// bundled simulator scenario with jobs has fewer nodes, so their replays
// read every node and stay deterministic.
const maxRailRoomNodes = 256
