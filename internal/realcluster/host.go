package realcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
)

const cgroupRoot = "/sys/fs/cgroup"

// hierarchies are the mounted v1 hierarchies (cpu, memory, ...; the
// named systemd one too), each once, and a v2 root if there is one.
func hierarchies() []string {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 || !e.IsDir() {
			continue // cpu -> cpu,cpuacct: the same hierarchy again
		}
		out = append(out, filepath.Join(cgroupRoot, e.Name()))
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		out = []string{cgroupRoot} // cgroup v2: one hierarchy
	}
	return out
}

// makeCgroups creates rel in every hierarchy; the kubelet runs a node's
// pods under it (its cgroupRoot). It returns what it made, for
// removeCgroups.
func makeCgroups(rel string) ([]string, error) {
	var made []string
	for _, h := range hierarchies() {
		top := filepath.Join(h, strings.Split(rel, "/")[0])
		if _, err := os.Stat(top); errors.Is(err, os.ErrNotExist) {
			made = append(made, top)
		}
		if err := os.MkdirAll(filepath.Join(h, rel), 0o755); err != nil {
			return made, fmt.Errorf("cgroup %s: %w", filepath.Join(h, rel), err)
		}
		if filepath.Base(h) == "cpuset" {
			// A v1 cpuset cgroup takes tasks only once it has CPUs and
			// memory nodes: copy them down from the root.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					continue
				}
				p := h
				for _, part := range strings.Split(rel, "/") {
					p = filepath.Join(p, part)
					_ = os.WriteFile(filepath.Join(p, f), v, 0o644)
				}
			}
		}
	}
	return dedupe(made), nil
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// removeCgroups removes each cgroup tree, deepest first, once its tasks
// are gone (the killed processes leave them within moments).
func removeCgroups(tops []string) {
	for _, top := range tops {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if rmTree(top) == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func rmTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	// A cgroup directory's files are not removed; rmdir takes them.
	return os.Remove(dir)
}

// HostPaths are the host paths the cluster's components write when
// nothing shadows them.
var HostPaths = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd", "/run/netns",
	"/var/lib/cni", "/var/lib/containerd", "/etc/cni", "/opt/cni", "/usr/libexec/kubernetes", "/var/run/nri", "/etc/kubernetes"}

// HostState records what the cluster would change on the host if nothing
// kept it off: HostPaths (absent, or their entries), the sysctls the
// kubelet, the bridge plugin and kube-proxy set, every cgroup of every
// hierarchy, the host's network links and iptables rules. Two records
// taken around a cluster's life must be equal.
func HostState() map[string]string {
	out := map[string]string{}
	realkubelet.PathsState(HostPaths, out)
	for _, s := range append([]string{"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
		"net/netfilter/nf_conntrack_max"}, realkubelet.Sysctls...) {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			out["sysctl "+s] = "unreadable"
			continue
		}
		out["sysctl "+s] = strings.TrimSpace(string(v))
	}
	for _, h := range hierarchies() {
		// Every cgroup, not only the top ones: a runtime that puts
		// containers under a cgroup the host already has (/k8s.io) leaks
		// below it.
		var dirs []string
		_ = filepath.WalkDir(h, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && path != h {
				rel, _ := filepath.Rel(h, path)
				dirs = append(dirs, rel)
			}
			return nil
		})
		out["cgroups "+h] = strings.Join(dirs, " ")
	}
	if b, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		var names []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				names = append(names, f[1])
			}
		}
		out["links"] = strings.Join(names, " ")
	}
	for _, t := range []string{"iptables-save", "ip6tables-save"} {
		if b, err := exec.Command(t).Output(); err == nil {
			var rules []string
			for _, l := range strings.Split(string(b), "\n") {
				if !strings.HasPrefix(l, "#") {
					rules = append(rules, l)
				}
			}
			out[t] = strings.Join(rules, "\n")
		}
	}
	return out
}
