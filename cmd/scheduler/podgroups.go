package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/nicaffinity/nicaffinity/pkg/podgroupapi"
)

// withPodGroupCheck runs run only after checking that the apiserver
// serves the PodGroup API when the GenericWorkload gate is on. Without
// the API, kube-scheduler would wait for ever on a PodGroup informer that
// never syncs and place no pod (a standard 1.37 apiserver does not serve
// it); so the gate and the gates that need it are turned off, and the
// scheduler says so once in its log and in an Event on its own pod.
func withPodGroupCheck(run func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if utilfeature.DefaultFeatureGate.Enabled(podgroupapi.Gate) {
			if err := checkPodGroupAPI(cmd); err != nil {
				return err
			}
		}
		return run(cmd, args)
	}
}

func checkPodGroupAPI(cmd *cobra.Command) error {
	cs, err := client(cmd)
	if err != nil {
		return err
	}
	served, err := podgroupapi.Served(cs.Discovery())
	if err != nil {
		// The apiserver did not answer: the scheduler's own start will
		// say why; keep the gate as configured.
		klog.Background().Error(err, "Could not check for the PodGroup API; keeping the feature gates as configured")
		return nil
	}
	if served {
		return nil
	}
	off := map[string]bool{podgroupapi.Gate: false}
	for _, g := range podgroupapi.Dependents {
		off[g] = false
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(off); err != nil {
		return fmt.Errorf("turning %s off without the PodGroup API: %w", podgroupapi.Gate, err)
	}
	klog.Background().Info("Running without gangs", "reason", podgroupapi.ErrNotServed.Error())
	eventOnOwnPod(cs, podgroupapi.ErrNotServed.Error())
	return nil
}

// client is the scheduler's client as its flags and configuration file
// name it: --kubeconfig and --master win, then the file's
// clientConnection.kubeconfig, then the in-cluster configuration.
func client(cmd *cobra.Command) (kubernetes.Interface, error) {
	flag := func(n string) string {
		if f := cmd.Flags().Lookup(n); f != nil {
			return f.Value.String()
		}
		return ""
	}
	kubeconfig, master := flag("kubeconfig"), flag("master")
	if file := flag("config"); file != "" && kubeconfig == "" {
		cfg, err := options.LoadConfigFromFile(klog.Background(), file)
		if err != nil {
			return nil, fmt.Errorf("reading --config %s: %w", file, err)
		}
		kubeconfig = cfg.ClientConnection.Kubeconfig
	}
	rc, err := clientcmd.BuildConfigFromFlags(master, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the scheduler's client configuration: %w", err)
	}
	rc.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(rc)
}

// eventOnOwnPod records a Warning Event on the scheduler's pod (POD_NAME
// and POD_NAMESPACE, from the downward API in the chart), where `kubectl
// describe` shows it; outside a pod it records nothing.
func eventOnOwnPod(cs kubernetes.Interface, msg string) {
	name, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: name + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, APIVersion: "v1"},
		Reason:         "PodGroupAPINotServed",
		Message:        msg,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "nicaffinity-scheduler"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := cs.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.Background().Error(err, "Could not record the Event about running without gangs", "pod", klog.KRef(ns, name))
	}
}
