# The second scheduler: kube-scheduler with the NICAffinity plugin. No cgo
# (nothing in it reaches NVML), so it is a static binary on distroless
# static, as the non-root user the manifests run it as (65532). Built for
# any target platform from the build platform (buildx --platform).
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
      -ldflags "-s -w -X github.com/nicaffinity/nicaffinity/pkg/version.Version=${VERSION} -X k8s.io/component-base/version.gitVersion=v1.37.2-nicaffinity.${VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
      -o /out/scheduler ./cmd/scheduler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/scheduler /scheduler
USER 65532:65532
ENTRYPOINT ["/scheduler"]
