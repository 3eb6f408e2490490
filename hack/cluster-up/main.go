// Command cluster-up brings up the real cluster test/cluster uses (two
// simulated 8-GPU nodes with containerd, internal/realcluster), installs
// nicaffinity on it with helm as `make test-cluster` does, and keeps it
// running until it is told to stop (SIGTERM or SIGINT; `make cluster-down`),
// so anyone with a Linux machine and root can try manifests/examples. The
// apiserver lives in the cluster's own network namespace; this process
// forwards 127.0.0.1:<port> on the host to it, and the kubeconfig it
// writes points there. Not shipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/nicaffinity/nicaffinity/internal/clusterinstall"
	"github.com/nicaffinity/nicaffinity/internal/realcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-up:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "_output/cluster-up", "where the kubeconfig goes")
	imagesDir := flag.String("images", "_output/images", "make images' output")
	chart := flag.String("chart", "charts/nicaffinity", "the chart")
	port := flag.Int("port", 6443, "the host's loopback port that reaches the apiserver")
	flag.Parse()
	bin, err := realcluster.BinDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "cluster-up")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	archives, tag, err := clusterinstall.Images(*imagesDir, bin, tmp)
	if err != nil {
		return err
	}
	nodes, err := clusterinstall.Nodes()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := realcluster.Start(ctx, realcluster.Options{Nodes: nodes, Images: archives, FeatureGates: "GenericWorkload=true", PodGroupAPI: true})
	if err != nil {
		return err
	}
	defer c.Close()
	chartPath, err := filepath.Abs(*chart)
	if err != nil {
		return err
	}
	if _, err := clusterinstall.Run(ctx, c, "helm", append([]string{"install", "nicaffinity", chartPath, "--wait", "--timeout", "5m"}, clusterinstall.Values(tag)...)...); err != nil {
		return err
	}
	if err := clusterinstall.Apply(ctx, c, clusterinstall.VendorManifest(false)); err != nil {
		return err
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		return fmt.Errorf("the host's port for the apiserver: %w (--port to choose another)", err)
	}
	defer l.Close()
	go forward(l, c)
	kubeconfig, err := filepath.Abs(filepath.Join(*out, "kubeconfig"))
	if err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + l.Addr().String()
	}
	// Inline the certificates: the cluster's directory is private to it.
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return err
	}
	for _, cl := range cfg.Clusters {
		if cl.CertificateAuthorityData, err = os.ReadFile(cl.CertificateAuthority); err != nil {
			return err
		}
		cl.CertificateAuthority = ""
	}
	for _, a := range cfg.AuthInfos {
		if a.ClientCertificateData, err = os.ReadFile(a.ClientCertificate); err != nil {
			return err
		}
		if a.ClientKeyData, err = os.ReadFile(a.ClientKey); err != nil {
			return err
		}
		a.ClientCertificate, a.ClientKey = "", ""
	}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	fmt.Printf(`nicaffinity is installed on a cluster of %d simulated GPU nodes (%s).
  export KUBECONFIG=%s
  kubectl get nodes; kubectl apply -f manifests/examples/ib.yaml
  make cluster-down   # or kill %d: stops every process of the cluster
`, len(nodes), strings.Join(nodeNames(), ", "), kubeconfig, os.Getpid())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-stop:
	case <-waitUnhealthy(c):
		fmt.Fprintln(os.Stderr, "cluster-up: a part of the cluster exited:", c.Healthy())
	}
	os.Remove(kubeconfig)
	return nil
}

func nodeNames() []string {
	var out []string
	for _, s := range clusterinstall.Shapes {
		out = append(out, s.Name+" "+s.Machine)
	}
	return out
}

// forward relays each connection to the apiserver inside the cluster.
func forward(l net.Listener, c *realcluster.Cluster) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			up, err := c.Dial(context.Background(), "tcp", realcluster.APIServerIP+":6443")
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, in) }()
			_, _ = io.Copy(in, up)
		}()
	}
}

func waitUnhealthy(c *realcluster.Cluster) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for c.Healthy() == nil {
			time.Sleep(time.Second)
		}
		close(ch)
	}()
	return ch
}
