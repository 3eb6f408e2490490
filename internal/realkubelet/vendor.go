package realkubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// Prefer is a vendor plugin's preferred allocation: size devices of
// available, must among them.
type Prefer func(available, must []string, size int) []string

// VendorOptions describe one stand-in vendor device plugin.
type VendorOptions struct {
	// Dir is the device-plugin directory it registers in: the kubelet's
	// DevicePluginDir, or the allocation proxy's vendor directory.
	Dir      string
	Resource string
	Devices  []*pluginapi.Device
	// Prefer, when set, answers GetPreferredAllocation (the NVIDIA device
	// plugin's go-gpuallocator policy, say); nil means the plugin offers
	// none and the kubelet chooses.
	Prefer Prefer
	// Env is the Allocate response's env for a container's devices.
	Env func(ids []string) map[string]string
}

// Vendor is a stand-in vendor device plugin: Kubernetes' own stub device
// plugin (pkg/kubelet/cm/devicemanager/plugin/v1beta1, the one its node
// e2e suites use) serving one resource, with a registration loop that
// registers again whenever kubelet.sock in Dir is made anew, as real
// vendor plugins do after a kubelet (or proxy) restart.
type Vendor struct {
	opts   VendorOptions
	stub   *plugin.Stub
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	allocations [][]string
	registered  int
}

// StartVendor serves the plugin and registers it.
func StartVendor(opts VendorOptions) (*Vendor, error) {
	v := &Vendor{opts: opts, done: make(chan struct{})}
	v.stub = plugin.NewDevicePluginStub(klog.Background(), opts.Devices, filepath.Join(opts.Dir, v.socket()), opts.Resource, false, opts.Prefer != nil)
	if opts.Prefer != nil {
		v.stub.SetGetPreferredAllocFunc(v.preferred)
	}
	v.stub.SetAllocFunc(v.allocate)
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	if err := v.stub.Start(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("vendor plugin %s: %w", opts.Resource, err)
	}
	go v.registerLoop(ctx)
	return v, nil
}

func (v *Vendor) preferred(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range r.ContainerRequests {
		ids := v.opts.Prefer(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (v *Vendor) allocate(r *pluginapi.AllocateRequest, devs map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, cr := range r.ContainerRequests {
		for _, id := range cr.DevicesIds {
			if _, ok := devs[id]; !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		v.allocations = append(v.allocations, slices.Clone(cr.DevicesIds))
		car := &pluginapi.ContainerAllocateResponse{}
		if v.opts.Env != nil {
			car.Envs = v.opts.Env(cr.DevicesIds)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

// Allocations are the device sets the kubelet allocated, in call order.
func (v *Vendor) Allocations() [][]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.allocations)
}

// Registered counts the plugin's registrations.
func (v *Vendor) Registered() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.registered
}

// registerLoop registers whenever Dir's kubelet.sock is new (another
// inode or modification time: a deleted file's inode can come back) or the
// plugin's own socket is gone (the kubelet wipes its directory when it
// starts): at start, and after whatever serves kubelet.sock restarts.
func (v *Vendor) registerLoop(ctx context.Context) {
	defer close(v.done)
	kubeletSock := filepath.Join(v.opts.Dir, "kubelet.sock")
	type id struct {
		ino   uint64
		mtime int64
	}
	var last id
	for {
		if st, err := os.Stat(kubeletSock); err == nil {
			cur := id{st.Sys().(*syscall.Stat_t).Ino, st.ModTime().UnixNano()}
			_, ownErr := os.Stat(filepath.Join(v.opts.Dir, v.socket()))
			if cur != last || ownErr != nil {
				if ownErr != nil {
					_ = v.stub.Restart(ctx)
				}
				if err := v.stub.Register(ctx, kubeletSock, v.opts.Resource, ""); err == nil {
					// The kubelet registered with is the one serving
					// kubelet.sock now, not necessarily the one stat'd
					// above: a kubelet that starts between the two stats
					// wipes this plugin's socket after the first, and the
					// dial reaches it. Keeping the first would register a
					// second time with the same kubelet, which its device
					// manager refuses ("device plugin already connected")
					// and then drops the resource's client.
					if st, err := os.Stat(kubeletSock); err == nil {
						cur = id{st.Sys().(*syscall.Stat_t).Ino, st.ModTime().UnixNano()}
					}
					last = cur
					v.mu.Lock()
					v.registered++
					v.mu.Unlock()
				} else {
					_ = v.stub.Restart(ctx)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (v *Vendor) socket() string {
	return "vendor-" + strings.NewReplacer("/", "_", ".", "_").Replace(v.opts.Resource) + ".sock"
}

// Stop stops the plugin (a vendor pod going away): its socket is removed.
func (v *Vendor) Stop() {
	v.cancel()
	<-v.done
	_ = v.stub.Stop(klog.Background())
}
