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
go build -o "$tmp/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
cg() { "$tmp/controller-gen" "$@"; }

cg object:headerFile=hack/boilerplate.go.txt paths=./api/... output:object:dir="$out/api/v1alpha1"
rm -rf "$out/config/crd" "$out/config/webhook" "$out/config/capi" "$out/config/rbac"
cg crd paths=./api/... output:crd:artifacts:config="$out/config/crd"
cg webhook paths=./internal/webhooks/... output:webhook:artifacts:config="$out/config/webhook"
cg rbac:roleName=winkube-manager paths=./internal/controllers/... output:rbac:artifacts:config="$out/config/rbac"

# Cluster API does not ship its CRD manifests in its Go module; generate them
# from its own types (the version go.mod pins) so envtest and `winkube up`
# install exactly the API the controllers were compiled against.
for p in core/v1beta2 bootstrap/kubeadm/v1beta2 controlplane/kubeadm/v1beta2 addons/v1beta2; do
	cg crd paths="sigs.k8s.io/cluster-api/api/$p" output:crd:artifacts:config="$out/config/capi/$(echo "$p" | tr / -)"
done
# Cluster API finds a provider's served version by this contract label on
# the CRD, which its kustomize configuration adds; so do we.
for f in "$out"/config/capi/*/*.yaml; do
	sed -i 's/^metadata:$/metadata:\n  labels:\n    cluster.x-k8s.io\/v1beta2: v1beta2/' "$f"
done
