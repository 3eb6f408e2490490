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

.PHONY: all build images test test-compat test-kubelet vet demo demo-large demo-dra demo-topo bench fuzz clean

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

# Container images (images/*.Dockerfile), tagged with the release, with
# docker or podman, whichever is installed (CONTAINER_TOOL= to choose).
IMAGE_REPO     ?= ghcr.io/nicaffinity
IMAGES         := scheduler topology-exporter allocation-proxy
# Image tags allow no "+": v0.37.0-dev+abc1234 becomes v0.37.0-dev-abc1234.
IMAGE_TAG      := $(subst +,-,$(VERSION))
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
images:
	@if [ -z "$(CONTAINER_TOOL)" ]; then \
	  echo "make images: neither docker nor podman is installed here. Install one (or set CONTAINER_TOOL=...) and run it again; images/*.Dockerfile are the recipes."; \
	  exit 1; \
	fi
	@if ! $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
	  echo "make images: $(CONTAINER_TOOL) is installed but cannot reach its engine ($(CONTAINER_TOOL) info fails): start it, or use another machine."; \
	  exit 1; \
	fi
	@set -e; for i in $(IMAGES); do \
	  echo "$(CONTAINER_TOOL) build $(IMAGE_REPO)/$$i:$(IMAGE_TAG)"; \
	  $(CONTAINER_TOOL) build -f images/$$i.Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE_REPO)/$$i:$(IMAGE_TAG) . ; \
	done

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
RACE_PKGS := ./pkg/plugins/nicaffinity/ ./pkg/exporter/ ./pkg/allocproxy/
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
