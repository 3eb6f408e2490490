package nicaffinity

import (
	"slices"
	"sync"

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
//   - a job's rails are the union of its pods' rails, sorted, replaced
//     whole on every change, so a reader's slice never changes under it;
//   - a job goes when its last pod goes; at most maxJobs jobs and
//     maxJobPods pods a job are tracked, so a tenant creating jobs or pods
//     without end cannot grow the store without bound (past the caps, new
//     jobs and pods are placed as jobs of one).
type jobRails struct {
	mu    sync.Mutex
	jobs  map[string]*jobEntry
	podOf map[types.UID]string
	// full is logged once per time the cap is reached.
	full bool
}

type jobEntry struct {
	pods  map[types.UID][]string
	rails []string
}

// Caps of the job store.
const (
	maxJobs    = 10_000
	maxJobPods = 10_000
)

func newJobRails() *jobRails {
	return &jobRails{jobs: map[string]*jobEntry{}, podOf: map[types.UID]string{}}
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

// add records that pod of job holds rails (a pod of no job, or one whose
// plan names no rail, is not recorded).
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
		if len(j.jobs) >= maxJobs {
			if !j.full {
				klog.InfoS("Job rails store is full; pods of further jobs are placed without their job's rails", "jobs", len(j.jobs))
				j.full = true
			}
			return
		}
		e = &jobEntry{pods: map[types.UID][]string{}}
		j.jobs[job] = e
	}
	if old, ok := e.pods[pod]; ok && slices.Equal(old, rails) {
		return
	}
	if _, ok := e.pods[pod]; !ok && len(e.pods) >= maxJobPods {
		return
	}
	e.pods[pod] = slices.Clone(rails)
	j.podOf[pod] = job
	e.rails = unionRails(e.pods)
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
	delete(e.pods, pod)
	if len(e.pods) == 0 {
		delete(j.jobs, job)
		j.full = false
		return
	}
	e.rails = unionRails(e.pods)
}

// size is how many jobs and pods the store tracks.
func (j *jobRails) size() (jobs, pods int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.jobs), len(j.podOf)
}

func unionRails(pods map[types.UID][]string) []string {
	var out []string
	for _, rs := range pods {
		for _, r := range rs {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	slices.Sort(out)
	return out
}

// railRoom is, per rail, how many free GPUs are at level index li or
// closer to a NIC on it, over the usable views of nodes that could take a
// pod of gpus GPUs there at all: where a job placing its first pod has the
// most room for the rest. It runs in Reserve, on the scheduling cycle's
// one thread, once per multi-pod job, so its work is bounded per call: it
// reads at most maxRailRoomNodes views, all of a smaller cluster's and, of
// a larger one, as many as the map's iteration order gives first (a
// sample, as any estimate of where the job's later pods will find room
// can only be).
func (c *Cache) railRoom(li, gpus int) map[string]int {
	room := map[string]int{}
	read := 0
	for _, cell := range *c.cells.Load() {
		if read++; read > maxRailRoomNodes {
			break
		}
		v, _ := usable(cell.Load())
		if v == nil || (v.Free&v.C.AnyNear[li]).Count() < gpus {
			continue
		}
		for n, nic := range v.C.NICs {
			if nic.Rail != "" {
				room[nic.Rail] += (v.Free & v.C.Near[li][n]).Count()
			}
		}
	}
	return room
}

// maxRailRoomNodes bounds railRoom's reads. A full pass over 5000 nodes in
// every multi-pod job's first Reserve cost the mixed bench's nicaffinity
// profile a third of its throughput (docs/simulate.md, bench); every
// bundled simulator scenario with jobs has fewer nodes, so their replays
// read every node and stay deterministic.
const maxRailRoomNodes = 256
