# The two set-up commands of README.md are `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)
GO_TEST_FLAGS ?= -count=1 -timeout=20m

.PHONY: all build run test test-short e2e-upgrade tools tools-previous vet lint generate verify-generate krew release image e2e-upstream e2e-upstream-bin

# What `make release` and `make image` publish. Build for your own registry
# with e.g. `make image release REGISTRY=registry.example.com/platform`.
VERSION ?= v0.1.0
REGISTRY ?= ghcr.io/winkube
IMAGE ?= $(REGISTRY)/winkube-manager:$(VERSION)
OUT := $(CURDIR)/out

all: build

## tools: build kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kubeadm, kubectl and metrics-server into bin/ (only when their pins changed)
tools:
	@bash hack/tools/build.sh

## tools-previous: the tools and the previous minor's control plane in bin/v1.35.4/ (for `winkube up --kubernetes-version v1.35.4` and the upgrade end-to-end test)
tools-previous:
	@TOOLS_PREVIOUS=1 bash hack/tools/build.sh

## build: build bin/winkube, and bin/kubectl-winkube (the same binary as kubectl's plugin)
build:
	go build -o $(BIN)/winkube ./cmd/winkube
	ln -sf winkube $(BIN)/kubectl-winkube
	printf '#!/bin/sh\n# kubectl (1.26+) runs this to complete "kubectl winkube ..."\nexec kubectl-winkube __complete "$$@"\n' > $(BIN)/kubectl_complete-winkube
	chmod +x $(BIN)/kubectl_complete-winkube

## krew: the kubectl plugin's release archives and krew manifest in out/krew (KREW_VERSION=v0.1.0)
KREW_VERSION ?= $(VERSION)
KREW_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
krew:
	@rm -rf out/krew && mkdir -p out/krew/bin
	@set -e; args=""; for p in $(KREW_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; exe=kubectl-winkube; [ $$os = windows ] && exe=$$exe.exe; \
		echo "building $$p"; CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -o out/krew/bin/$$os-$$arch/$$exe ./cmd/winkube; \
		args="$$args $$p=out/krew/bin/$$os-$$arch/$$exe"; done; \
		go run ./hack/krew -version $(KREW_VERSION) -out out/krew $$args

## run: the main job (see README.md): a mixed cluster on this machine (winkube up)
run: tools build
	$(BIN)/winkube up $(RUN_ARGS)

## vet: go vet over the module
vet:
	go vet -tags e2e ./...

## lint: golangci-lint as .golangci.yml sets it (go vet's analyzers, the import rules and a few more), built from hack/lint/go.mod
lint:
	go tool -modfile=hack/lint/go.mod golangci-lint run ./...

## test: build the tools (both minors: the upgrade end-to-end test boots the previous one) if needed, lint, and run every test (envtest ones included, and the e2e-tagged packages internal/localworld/e2e and minorupgrade)
test: tools-previous lint
	go tool gotestsum --format pkgname-and-test-fails -- -tags e2e $(GO_TEST_FLAGS) ./...

## test-short: the fast loop: unit, envtest and emulator tests without the ones that boot a world (go test -short; no lint; the e2e-tagged packages are not even built)
# CI runs `make test`: GO_TEST_FLAGS must not say -short, or the booted worlds go untested.
test-short: tools
	go tool gotestsum --format pkgname-and-test-fails -- -short $(GO_TEST_FLAGS) ./...

## e2e-upgrade: the upgrade rehearsal alone (internal/localworld/minorupgrade, also in `make test`): a mixed world booted at the previous minor, upgraded to the current one
e2e-upgrade: tools-previous
	go test -tags e2e -count=1 -timeout=40m -v ./internal/localworld/minorupgrade/

## e2e-upstream-bin: build Kubernetes' own Windows e2e binary (test/e2e/windows at the pinned v1.36.3, from the Go module proxy) and Ginkgo into bin/
e2e-upstream-bin:
	cd hack/e2e && nice go test -c -vet=off -trimpath -o $(BIN)/e2e.test .
	cd hack/e2e && nice go build -trimpath -o $(BIN)/ginkgo github.com/onsi/ginkgo/v2/ginkgo

## e2e-upstream: boot a 1+1+2 local world and run the upstream [sig-windows] specs it models (report in bin/e2e-upstream/; not part of `make test`: see hack/e2e/README.md)
e2e-upstream: tools e2e-upstream-bin
	go test -tags upstreame2e -count=1 -timeout=70m -v -run TestUpstreamWindowsE2E ./internal/localworld/upstreame2e/

help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

## generate: deepcopy, winkube's CRDs and webhook configuration, and Cluster API's CRDs, all by controller-gen
generate:
	bash hack/generate.sh

## release: the clusterctl provider repository out/infrastructure-winkube/$(VERSION)/ (metadata, components running $(IMAGE), cluster templates)
release:
	go run ./hack/release -version $(VERSION) -image $(IMAGE) -out $(OUT)

## image: the manager image $(IMAGE) as a tarball out/winkube-manager-$(VERSION).tar (docker load, crane push), built without a container runtime
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w -X github.com/winkube/winkube/internal/version.Version=$(VERSION)" \
		-o $(OUT)/image/winkube ./cmd/winkube-manager
	go run ./hack/release -image $(IMAGE) -binary $(OUT)/image/winkube -image-tarball $(OUT)/winkube-manager-$(VERSION).tar
