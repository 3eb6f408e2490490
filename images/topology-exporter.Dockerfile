# The node exporter. It keeps cgo: go-nvml reaches NVML through cgo and
# dlopen("libnvidia-ml.so.1"), which the NVIDIA container runtime mounts
# from the host driver (runtimeClassName: nvidia), so the image needs a
# C library and a dynamic loader but no NVIDIA library of its own:
# distroless base (glibc), the smallest base that has them. It runs as
# root, as the manifests say: the kubelet's podresources socket is root's.
# cgo does not cross-compile here: build each platform natively
# (buildx with one builder per platform, or QEMU).
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
ARG VERSION=v0.37.0-dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations go build -trimpath -tags grpcnotrace \
      -ldflags "-s -w -X github.com/nicaffinity/nicaffinity/pkg/version.Version=${VERSION}" \
      -o /out/topology-exporter ./cmd/topology-exporter

FROM gcr.io/distroless/base-debian12
COPY --from=build /out/topology-exporter /topology-exporter
ENTRYPOINT ["/topology-exporter"]
