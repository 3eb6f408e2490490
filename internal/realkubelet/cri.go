package realkubelet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	fakeremote "k8s.io/cri-client/pkg/fake"
)

// runtime is cri-client's fake CRI runtime (the one kubemark's hollow
// nodes use) with one addition: it keeps each container's env as the
// kubelet made it, device plugins' Allocate env included, which the fake
// drops.
type runtime struct {
	*fakeremote.RemoteRuntime
	server *grpc.Server

	mu  sync.Mutex
	env map[string]map[string]string // namespace/pod/container -> env
}

func newRuntime() *runtime {
	r := &runtime{RemoteRuntime: fakeremote.NewFakeRemoteRuntime(), server: grpc.NewServer(), env: map[string]map[string]string{}}
	kubeapi.RegisterRuntimeServiceServer(r.server, r)
	kubeapi.RegisterImageServiceServer(r.server, r.RemoteRuntime)
	// cri-client refuses images of size 0, the fake's default.
	r.ImageService.SetFakeImageSize(1 << 20)
	r.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true}, {Type: kubeapi.NetworkReady, Status: true},
	}}
	return r
}

func (r *runtime) start(socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	go func() { _ = r.server.Serve(l) }()
	return nil
}

func (r *runtime) stop() { r.server.Stop() }

// CreateContainer records the container's env, then creates it.
func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	env := map[string]string{}
	for _, kv := range req.GetConfig().GetEnvs() {
		env[kv.Key] = string(kv.Value)
	}
	md := req.GetSandboxConfig().GetMetadata()
	r.mu.Lock()
	r.env[md.GetNamespace()+"/"+md.GetName()+"/"+req.GetConfig().GetMetadata().GetName()] = env
	r.mu.Unlock()
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	// The fake drops the log path, and the kubelet's log manager removes
	// "<log path>*" when it cleans a container up: with an empty path,
	// every file in its working directory. Report it as runtimes do.
	if lp := req.GetConfig().GetLogPath(); lp != "" {
		fr := r.RuntimeService
		fr.Lock()
		if c, ok := fr.Containers[resp.ContainerId]; ok {
			c.LogPath = filepath.Join(req.GetSandboxConfig().GetLogDirectory(), lp)
		}
		fr.Unlock()
	}
	return resp, nil
}

// Env is the env the kubelet gave a pod's container, or nil.
func (k *Kubelet) Env(namespace, pod, container string) map[string]string {
	k.rt.mu.Lock()
	defer k.rt.mu.Unlock()
	return k.rt.env[namespace+"/"+pod+"/"+container]
}

// ExitContainer marks a pod's container as exited with code 0, as the
// fake runtime's containers never end by themselves: an init container
// must, for the pod's main containers to start.
func (k *Kubelet) ExitContainer(namespace, pod, container string) bool {
	fr := k.rt.RuntimeService
	fr.Lock()
	defer fr.Unlock()
	for _, c := range fr.Containers {
		sb, ok := fr.Sandboxes[c.SandboxID]
		if !ok || sb.Metadata.GetNamespace() != namespace || sb.Metadata.GetName() != pod || c.Metadata.GetName() != container {
			continue
		}
		if c.State == kubeapi.ContainerState_CONTAINER_RUNNING {
			c.State, c.ExitCode, c.FinishedAt = kubeapi.ContainerState_CONTAINER_EXITED, 0, c.StartedAt+1
			return true
		}
	}
	return false
}
