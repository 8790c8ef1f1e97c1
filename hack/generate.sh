#!/usr/bin/env bash
# Regenerates everything controller-gen derives from Go types. The test
# TestGeneratedFilesAreFresh runs this into a temporary folder and fails when
# the committed output differs, so generated files never go stale.
set -euo pipefail
out=${1:-.}
cd "$(dirname "$0")/.."
cg() { go tool controller-gen "$@"; }

cg object:headerFile=hack/boilerplate.go.txt paths=./api/...
if [ "$out" != . ]; then
	mkdir -p "$out/api/v1alpha1"
	cp api/v1alpha1/zz_generated.deepcopy.go "$out/api/v1alpha1/"
fi
cg crd paths=./api/... output:crd:artifacts:config="$out/config/crd"
cg webhook paths=./internal/webhooks/... output:webhook:artifacts:config="$out/config/webhook"

# Cluster API does not ship its CRD manifests in its Go module; generate them
# from its own types (the version go.mod pins) so envtest and `winkube up`
# install exactly the API the controllers were compiled against.
capi=$(go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api/api)
for p in core/v1beta2 bootstrap/kubeadm/v1beta2 controlplane/kubeadm/v1beta2 addons/v1beta2; do
	(cd "$capi" && cg crd paths="./$p" output:crd:artifacts:config="$OLDPWD/$out/config/capi/$(echo "$p" | tr / -)")
done
