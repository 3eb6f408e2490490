//go:build cluster

package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// documented are the series docs/metrics.md lists, by section.
func documented(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	row := regexp.MustCompile("^\\| `(nicaffinity_[a-z_]+)`")
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "## ") {
			section = l
		}
		if m := row.FindStringSubmatch(l); m != nil {
			out[section] = append(out[section], m[1])
		}
	}
	return out
}

// scrape gets /metrics through the cluster's network namespace.
func (e *env) scrape(url, token string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: e.c.Dial,
		// As the ServiceMonitor: the scheduler's serving certificate is
		// self-signed.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return string(body), err
}

// TestClusterMetrics: each component's /metrics, scraped as the chart's
// ServiceMonitors say, serves the series docs/metrics.md lists.
func TestClusterMetrics(t *testing.T) {
	e := startEnv(t)
	e.install()
	ctx := context.Background()
	// A refusal by the plugin (the whole H20 fits the pod's counts, but not
	// aligned: the plugin's Filter, not NodeResourcesFit, rejects it; under
	// required, since a bounded pod no node can align does not wait), then
	// a placement, so that the counters have series.
	e.create(workload{name: "refused", gpus: 8, vfs: 1, policy: annotations.PolicyRequired})
	e.waitUnschedulable("refused")
	e.create(workload{name: "placed", gpus: 1, rdma: true})
	e.waitRunning("placed")
	e.observed("placed")

	// A scraper's identity, as Prometheus's: get on /metrics.
	if _, err := e.c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "scrape-metrics"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scrape-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "scrape-metrics"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := e.c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	docs := documented(t)
	for _, c := range []struct {
		section, namespace, selector, url string
		token                             string
		except                            []string
	}{
		{"## Scheduler (`NICAffinity` plugin)", schedNS, "app.kubernetes.io/name=nicaffinity-scheduler", "https://%s:10259/metrics", tr.Status.Token, nil},
		{"## Exporter", nodeNS, "app.kubernetes.io/name=topology-exporter", "http://%s:8080/metrics", "", []string{"nicaffinity_exporter_topology_foreign_manager"}},
		{"## Allocation proxy", nodeNS, "app.kubernetes.io/name=allocation-proxy", "http://%s:8081/metrics", "", nil},
	} {
		want := docs[c.section]
		if len(want) == 0 {
			t.Errorf("docs/metrics.md lists no series under %q", c.section)
			continue
		}
		pods, err := e.c.Kube.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: c.selector})
		if err != nil || len(pods.Items) == 0 {
			t.Errorf("%s: no pods (%v)", c.selector, err)
			continue
		}
		// Every replica serves them; the scheduler's counters live in its
		// leader, so any replica with every series will do.
		var missing []string
		err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, p := range pods.Items {
				body, err := e.scrape(fmt.Sprintf(c.url, p.Status.PodIP), c.token)
				if err != nil {
					missing = []string{err.Error()}
					continue
				}
				missing = missing[:0]
				for _, m := range want {
					if !slices.Contains(c.except, m) && !regexp.MustCompile(`(?m)^`+m+`(_bucket|_sum|_count)?[{ ]`).MatchString(body) {
						missing = append(missing, m)
					}
				}
				if len(missing) == 0 {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%s: series missing from /metrics: %v", c.section, missing)
		}
	}
}
