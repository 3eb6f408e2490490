# The allocation proxy between the kubelet and the vendor device plugins.
# No cgo, so a static binary on distroless static; it runs as root, as the
# manifests say: the device plugin sockets are root's. Built for any target
# platform from the build platform.
ARG GO_VERSION=1.26
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.37.0-dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -tags grpcnotrace \
      -ldflags "-s -w -X github.com/nicaffinity/nicaffinity/pkg/version.Version=${VERSION}" \
      -o /out/allocation-proxy ./cmd/allocation-proxy

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/allocation-proxy /allocation-proxy
ENTRYPOINT ["/allocation-proxy"]
