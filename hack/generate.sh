#!/usr/bin/env bash
# Regenerates everything controller-gen derives from Go types: deepcopy,
# winkube's CRDs and webhook configuration, and Cluster API's CRDs.
# With an argument, writes into that folder instead of the tree (without
# touching the tree); TestGeneratedFilesAreFresh uses that to fail when the
# committed output is stale.
set -euo pipefail
out=${1:-.}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The go.mod's tool: `go tool` keeps the linked binary in the build cache.
cg() { go tool controller-gen "$@"; }

# Each controller-gen run lists and loads its packages before its generators
# start, which is most of its time, so generators share runs where that costs
# no more: object and crd read api/...; webhook and rbac only read markers
# (of internal/webhooks and internal/controllers) and type-check nothing.
# Not all in one: the object generator type-checks every root it is given,
# internal/controllers with all it imports. (Each generator writes only for
# the packages holding its markers: controller-tools v0.21.0,
# pkg/genall/genall.go, Generators.ForRoots and Runtime.Run.)
rm -rf "$out/config/crd" "$out/config/webhook" "$out/config/capi" "$out/config/rbac"
cg object:headerFile=hack/boilerplate.go.txt crd paths=./api/... \
	output:object:dir="$out/api/v1alpha1" output:crd:artifacts:config="$out/config/crd"
cg webhook rbac:roleName=winkube-manager paths="./internal/webhooks/...;./internal/controllers/..." \
	output:webhook:artifacts:config="$out/config/webhook" output:rbac:artifacts:config="$out/config/rbac"

# Cluster API does not ship its CRD manifests in its Go module; generate them
# from its own types (the version go.mod pins) so envtest and `winkube up`
# install exactly the API the controllers were compiled against. One run for
# its four API packages; the CRDs (<group>_<plural>.yaml) are then sorted
# into a folder per package by their group.
capi=$tmp/capi
cg crd paths="sigs.k8s.io/cluster-api/api/core/v1beta2;sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2;sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2;sigs.k8s.io/cluster-api/api/addons/v1beta2" \
	output:crd:artifacts:config="$capi"
for p in core-v1beta2:cluster bootstrap-kubeadm-v1beta2:bootstrap.cluster controlplane-kubeadm-v1beta2:controlplane.cluster addons-v1beta2:addons.cluster; do
	mkdir -p "$out/config/capi/${p%%:*}"
	mv "$capi/${p#*:}".x-k8s.io_*.yaml "$out/config/capi/${p%%:*}/"
done
if [ -n "$(ls -A "$capi")" ]; then
	echo "hack/generate.sh: Cluster API CRDs of a group with no folder here: $(ls "$capi")" >&2
	exit 1
fi
# Cluster API finds a provider's served version by this contract label on
# the CRD, which its kustomize configuration adds; so do we.
for f in "$out"/config/capi/*/*.yaml; do
	sed -i 's/^metadata:$/metadata:\n  labels:\n    cluster.x-k8s.io\/v1beta2: v1beta2/' "$f"
done
