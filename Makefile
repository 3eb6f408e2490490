# nicaffinity: place GPU pods next to their RDMA NICs.
GO       ?= go
# go-nvml's cgo preamble includes deprecated NVML calls; keep the build quiet.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
# go-nvml needs cgo (gcc); the module proxy is the only download.
export CGO_ENABLED := 1

DEMO_PROFILE ?= oci-bm-gpu-h100-8-8gpu-8x2portcx7
# make demo writes its HTML report here.
DEMO_REPORT ?= _output/demo
FUZZTIME     ?= 10s

.PHONY: all build build-images images image-tag cluster-bin test-cluster cluster-up cluster-down FORCE test test-compat test-kubelet vet demo demo-large demo-dra demo-topo bench fuzz clean

all: build

# Releases are v0.<Kubernetes minor>.<patch> (pkg/version): a v0.37.* tag
# when there is one, else v0.37.0-dev+<commit>. Every binary's --version
# prints it; the scheduler's reports the Kubernetes release it is built on
# plus ours.
VERSION  ?= $(shell git describe --tags --match 'v0.37.*' --dirty 2>/dev/null || echo v0.37.0-dev+$$(git rev-parse --short HEAD 2>/dev/null || echo unknown))
LDFLAGS  := -X github.com/nicaffinity/nicaffinity/pkg/version.Version=$(VERSION) \
            -X k8s.io/component-base/version.gitVersion=v1.37.2-nicaffinity.$(VERSION) \
            -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

# grpcnotrace leaves out gRPC's golang.org/x/net/trace and with it
# html/template: 4.6 MB less binary, which is most of the exporter's
# resident memory (docs/exporter.md, Footprint). The images build the same.
GOTAGS   ?= grpcnotrace

build:
	$(GO) build -tags "$(GOTAGS)" -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# Container images, written as OCI archives under _output/images/ with no
# container engine or registry (internal/images is the one recipe; a
# release publishes the same images with PUSH=1), then loaded into
# whichever of docker, podman and containerd answers here. Tagged with the
# release: v0.37.0-dev+abc1234 becomes v0.37.0-dev-abc1234 (tags allow no
# "+"); install the chart with --set image.tag=$(make -s image-tag).
IMAGE_REPO     ?= ghcr.io/nicaffinity
IMAGE_TAG      := $(subst +,-,$(VERSION))
IMAGES_DIR     := _output/images
IMAGE_LOAD     ?= auto
PUSH           ?=
# The images' binaries: static without cgo for the scheduler and the
# proxy, with cgo (glibc) for the exporter, whose image carries Debian's
# libc6.
build-images:
	CGO_ENABLED=0 $(GO) build -trimpath -tags "$(GOTAGS)" -ldflags "-s -w $(LDFLAGS)" -o $(IMAGES_DIR)/bin/ ./cmd/scheduler ./cmd/allocation-proxy
	$(GO) build -trimpath -tags "$(GOTAGS)" -ldflags "-s -w $(LDFLAGS)" -o $(IMAGES_DIR)/bin/ ./cmd/topology-exporter

# Debian's libc6, from Debian's archive (never the build host's files),
# as a plain tar of its files.
$(IMAGES_DIR)/libc6.tar:
	@command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "make images: the exporter's image takes glibc from Debian's libc6 package, and apt-get or dpkg-deb is missing here: build on Debian (bookworm)"; exit 1; }
	mkdir -p $(IMAGES_DIR)/deb
	cd $(IMAGES_DIR)/deb && rm -f libc6_*.deb && { apt-get download libc6 || { apt-get update && apt-get download libc6; }; }
	dpkg-deb --fsys-tarfile $(IMAGES_DIR)/deb/libc6_*.deb > $@.tmp && mv $@.tmp $@

images: build-images $(IMAGES_DIR)/libc6.tar
	$(GO) run ./hack/imagebuild --bin-dir $(IMAGES_DIR)/bin --out $(IMAGES_DIR) \
	  --libc-tar $(IMAGES_DIR)/libc6.tar --libc-version "$$(dpkg-deb -f $(IMAGES_DIR)/deb/libc6_*.deb Version)" \
	  --version $(VERSION) --revision "$$(git rev-parse HEAD 2>/dev/null)" --created "$$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
	  --repo $(IMAGE_REPO) --tag $(IMAGE_TAG) --load $(IMAGE_LOAD) $(if $(PUSH),--push)

image-tag:
	@echo $(IMAGE_TAG)

vet:
	$(GO) vet ./...

# -race is spent where concurrency lives: the plugin's cache (Filter and
# Score read views while informers and Reserve write them), the exporter's
# loop and the allocation proxy's servers. A race build of everything else
# would compile most of k8s.io/kubernetes a second time (12 of a 25-minute
# cold run); every package, these three included, also runs in one plain
# go test. In the plugin's package only the cache's tests build under
# -race (cache_test.go): the others drive the plugin through the scheduler
# framework's NodeInfo and CycleState, which would bring k8s.io/kubernetes's
# scheduler into the race build (framework_test.go).
#
# go vet runs every analyzer once, over our packages and (for their facts)
# every dependency. The go test steps run with -vet=off: their own vet
# would analyze all of k8s.io/kubernetes again, once per build mode.
RACE_PKGS := ./pkg/plugins/nicaffinity/ ./pkg/exporter/ ./pkg/allocproxy/ ./internal/memapi/
test: vet
	$(GO) test -vet=off -race -count=1 $(RACE_PKGS)
	$(GO) test -vet=off -count=1 ./...

# scheduler-plugins' NodeResourceTopologyMatch, as released, on the objects
# the exporter publishes: a module of its own (test/compat/go.mod), built
# once against the Kubernetes version scheduler-plugins pins (about two
# minutes cold), so it is a target of its own that CI (.ci/run) runs after
# make test. go test's own vet covers it (a separate go vet would analyze
# that Kubernetes again).
test-compat:
	cd test/compat && $(GO) test -count=1 ./...

# Kubernetes' own kubelet (cmd/kubelet at the go.mod's Kubernetes version,
# a tool dependency there) for test/kubelet, which runs it in a private
# mount namespace as root (internal/realkubelet). Built once: 15-20 cold
# minutes on 2 cores, then a relink only when go.mod or go.sum change. Its
# version stamp makes the Node report v1.37.2, not v0.0.0-master.
KUBELET_BIN := _output/kubelet/kubelet
$(KUBELET_BIN): go.mod go.sum
	$(GO) build -o $@ -ldflags "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" k8s.io/kubernetes/cmd/kubelet

test-kubelet: $(KUBELET_BIN)
	$(GO) vet -tags kubelet ./test/kubelet/
	NICAFFINITY_KUBELET=$(abspath $(KUBELET_BIN)) $(GO) test -vet=off -tags kubelet -count=1 -timeout 30m ./test/kubelet/

# A real cluster on this machine (internal/realcluster): etcd, the
# control plane, kube-proxy, kubectl, the kubelet and helm from the
# modules go.mod pins as tools; containerd and the CNI plugins from
# hack/clustertools (a module of its own: containerd's dependencies stay
# out of ours); runc and iptables from Debian, installed here when
# missing (as root). Built once into _output/cluster/bin, again only when
# a go.mod changes.
CLUSTER_BIN   := _output/cluster/bin
K8S_LDFLAGS   := -X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37
$(CLUSTER_BIN)/.built: go.mod go.sum hack/clustertools/go.mod hack/clustertools/go.sum hack/pause/main.go
	mkdir -p $(CLUSTER_BIN)/cni
	$(GO) build -ldflags "$(K8S_LDFLAGS)" -o $(CLUSTER_BIN)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet helm.sh/helm/v4/cmd/helm
	$(GO) build -o $(CLUSTER_BIN)/etcd go.etcd.io/etcd/server/v3
	CGO_ENABLED=0 $(GO) build -o $(CLUSTER_BIN)/pause ./hack/pause
	cd hack/clustertools && CGO_ENABLED=0 $(GO) build -tags "no_btrfs no_devmapper no_zfs" -o $(abspath $(CLUSTER_BIN))/ \
	  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
	cd hack/clustertools && CGO_ENABLED=0 $(GO) build -o $(abspath $(CLUSTER_BIN))/cni/ github.com/containernetworking/plugins/plugins/main/bridge \
	  github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/meta/portmap
	touch $@

cluster-bin: $(CLUSTER_BIN)/.built
	@missing=""; for t in runc:runc iptables:iptables ip:iproute2; do command -v $${t%%:*} >/dev/null || missing="$$missing $${t##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's$$missing"; apt-get install -y$$missing >/dev/null || { apt-get update >/dev/null && apt-get install -y$$missing >/dev/null; }; \
	  else echo "make cluster-bin: the real cluster needs$$missing (Debian: apt-get install$$missing, as root)"; exit 1; fi; \
	fi

# The stand-in vendor device plugin's binary (cgo: go-gpuallocator).
$(IMAGES_DIR)/bin/device-plugin-standin: FORCE
	$(GO) build -trimpath -tags "$(GOTAGS)" -o $@ ./hack/device-plugin-standin

# TestCluster*: the chart installed with the real helm on a real cluster
# of two nodes (test/cluster, build tag cluster).
test-cluster: cluster-bin build-images $(IMAGES_DIR)/libc6.tar $(IMAGES_DIR)/bin/device-plugin-standin
	$(MAKE) images IMAGE_LOAD=none
	$(GO) vet -tags cluster ./test/cluster/
	NICAFFINITY_CLUSTER_BIN=$(abspath $(CLUSTER_BIN)) NICAFFINITY_IMAGES=$(abspath $(IMAGES_DIR)) \
	  $(GO) test -vet=off -tags cluster -count=1 -timeout 40m -v ./test/cluster/

# The same cluster with nicaffinity installed, left running for you to
# try manifests/examples on (root; the README's Deploy section). It writes
# _output/cluster-up/kubeconfig; make cluster-down stops it.
CLUSTER_UP := _output/cluster-up
cluster-up: cluster-bin build-images $(IMAGES_DIR)/libc6.tar $(IMAGES_DIR)/bin/device-plugin-standin
	$(MAKE) images IMAGE_LOAD=none
	mkdir -p $(CLUSTER_UP)
	$(GO) build -o $(CLUSTER_UP)/cluster-up ./hack/cluster-up
	@if [ -f $(CLUSTER_UP)/pid ] && kill -0 $$(cat $(CLUSTER_UP)/pid) 2>/dev/null; then echo "a cluster runs already (pid $$(cat $(CLUSTER_UP)/pid)): make cluster-down first"; exit 1; fi
	@rm -f $(CLUSTER_UP)/kubeconfig; \
	NICAFFINITY_CLUSTER_BIN=$(abspath $(CLUSTER_BIN)) nohup $(CLUSTER_UP)/cluster-up --out $(CLUSTER_UP) --images $(IMAGES_DIR) > $(CLUSTER_UP)/log 2>&1 & echo $$! > $(CLUSTER_UP)/pid; \
	pid=$$(cat $(CLUSTER_UP)/pid); \
	until [ -f $(CLUSTER_UP)/kubeconfig ]; do \
	  kill -0 $$pid 2>/dev/null || { tail -30 $(CLUSTER_UP)/log; exit 1; }; sleep 1; \
	done; grep -v '^[IWE][0-9]' $(CLUSTER_UP)/log | tail -5

cluster-down:
	@if [ -f $(CLUSTER_UP)/pid ] && kill $$(cat $(CLUSTER_UP)/pid) 2>/dev/null; then \
	  while kill -0 $$(cat $(CLUSTER_UP)/pid) 2>/dev/null; do sleep 0.5; done; echo "stopped"; \
	else echo "no cluster runs"; fi; rm -f $(CLUSTER_UP)/pid

FORCE:

# The main job: a simulated cluster of real machine shapes, the same work
# through nicaffinity's policies and the default scheduler, three seeds:
# first a backlog (how much sooner the work finishes), then jobs arriving
# over time (docs/simulate.md has the time it takes).
demo:
	$(GO) run ./cmd/nicaffinity-sim simulate --scenario backlog,default,jobs --report $(DEMO_REPORT)

# The large scenario: 64 nodes, 1000 jobs, one seed (docs/simulate.md,
# "The large scenario").
demo-large:
	$(GO) run ./cmd/nicaffinity-sim simulate --scenario large --runs 1 --report $(DEMO_REPORT)-large

# The default scenario on a DRA cluster: jobs claim GPUs and NICs through
# DRA drivers' stand-ins; the columns differ in their claims (docs/dra.md,
# "Simulating a DRA cluster").
demo-dra:
	$(GO) run ./cmd/nicaffinity-sim simulate --dra --report $(DEMO_REPORT)-dra

# The topology of a bundled real machine, as nvidia-smi topo -m prints it.
demo-topo:
	$(GO) run ./cmd/nicaffinity topo --profile $(DEMO_PROFILE)

# Go micro-benchmarks (Filter/Score per node), then the scheduler with and
# without nicaffinity on 1000 nodes (NODES=5000 for the large run).
NODES ?= 1000
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	$(GO) run ./cmd/nicaffinity-sim bench --nodes $(NODES) --pods $(NODES)

# Short runs of every fuzz target; FUZZTIME=5m for a real session.
fuzz:
	@set -e; for spec in \
	  ./pkg/topology:FuzzParseSMIMatrix \
	  ./pkg/topology:FuzzFromHostData \
	  ./pkg/topology:FuzzNormalizeBusID \
	  ./pkg/topology:FuzzCPUListFromMask \
	  ./pkg/topology:FuzzACSFromConfig \
	  ./pkg/topology:FuzzVPDReadOnly \
	  ./pkg/topology/ncclxml:FuzzParse \
	  ./pkg/topology/sysfs:FuzzReadAttributes \
	  ./pkg/podresources:FuzzFromResponses \
	  ./pkg/request:FuzzRead \
	  ./pkg/request:FuzzRequests \
	  ./pkg/nccllog:FuzzParse \
	  ./pkg/annotations:FuzzParseAllocation \
	  ./pkg/annotations:FuzzParseObserved \
	  ./pkg/annotations:FuzzParseMaxLevel \
	  ./pkg/nrt:FuzzCompile \
	  ./pkg/nrt:FuzzDecode \
	  ./pkg/exporter:FuzzVerify \
	  ./pkg/dra:FuzzIndexSlices \
	  ./pkg/plugins/nicaffinity:FuzzBestCover \
	  ./pkg/allocproxy:FuzzChoose \
	  ./internal/sim:FuzzParseWorkload \
	  ./internal/sim:FuzzParseCluster \
	  ./internal/sim:FuzzParseTrace ; do \
	  pkg=$${spec%%:*}; fn=$${spec##*:}; \
	  echo "== $$pkg $$fn"; $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg; \
	done

clean:
	rm -rf bin/

# Regenerates the plugin configuration API's deepcopy, defaulting and
# conversion code (pkg/apis/config) with k8s.io/code-generator at the
# release the module pins.
CODEGEN_VERSION := v0.37.2
generate:
	cd pkg/apis/config && rm -f zz_generated.*.go v1/zz_generated.*.go
	$(GO) run k8s.io/code-generator/cmd/deepcopy-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt --output-file zz_generated.deepcopy.go ./pkg/apis/config ./pkg/apis/config/v1
	$(GO) run k8s.io/code-generator/cmd/defaulter-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt --output-file zz_generated.defaults.go ./pkg/apis/config/v1
	$(GO) run k8s.io/code-generator/cmd/conversion-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt --output-file zz_generated.conversion.go ./pkg/apis/config/v1
.PHONY: generate
