#!/usr/bin/env bash
# Builds the control-plane binaries winkube runs (envtest, the local management
# plane, emulated control-plane VMs), kubectl and metrics-server from the Go
# module proxy into bin/.
# Nothing is fetched from anywhere else. A stamp file records a hash of the pins
# so that a second run does nothing unless the pinned versions changed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${BIN_DIR:-$root/bin}
stamp=$bin/.tools-stamp
tools=(kube-apiserver kube-controller-manager kube-scheduler kubeadm kubectl etcd)

# metrics-server, the program the metrics-server add-on's pod runs in the
# local world (the version its image tag names: registry.MetricsServerImage),
# has its own module: it pins older k8s.io libraries than the control plane.
# Its own stamp, so that a change of either pin rebuilds only its binary.
# The version is stamped where its Makefile puts it (sigs.k8s.io/
# metrics-server v0.8.0 Makefile, VERSION_LDFLAGS: client-go's pkg/version).
ms_want=$(cat "$here/metrics-server/go.mod" "$here/metrics-server/go.sum" | sha256sum | cut -d' ' -f1)
if [ "$ms_want" != "$(cat "$bin/.metrics-server-stamp" 2>/dev/null || true)" ] || [ ! -x "$bin/metrics-server" ]; then
	msver=$(cd "$here/metrics-server" && go list -m -f '{{.Version}}' sigs.k8s.io/metrics-server)
	echo "hack/tools: building metrics-server ($msver)" >&2
	t0=$(date +%s)
	mkdir -p "$bin"
	(cd "$here/metrics-server" && go build -trimpath -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$msver" -o "$bin/metrics-server" sigs.k8s.io/metrics-server/cmd/metrics-server)
	echo "$ms_want" > "$bin/.metrics-server-stamp"
	echo "hack/tools: metrics-server built in $(( $(date +%s) - t0 ))s" >&2
fi

# The previous minor's control plane, for a local world that starts there
# and rehearses an upgrade to the pin above (issue 49): each v1.*/ module
# pins one release and builds into bin/<its version>/, stamped on its own.
# Built when asked (TOOLS_PREVIOUS=1): make tools-previous, on which make
# test and make e2e-upgrade depend (the upgrade end-to-end test,
# internal/localworld/minorupgrade); about 14 CPU-minutes with an empty
# build cache. make tools and make run leave it out.
# etcd is not rebuilt: kubeadm v1.35 and v1.36 both default to etcd 3.6.x
# (cmd/kubeadm/app/constants/constants.go DefaultEtcdVersion at
# kubernetes/kubernetes v1.35.4 and v1.36.3), which bin/etcd serves.
for prev in "$here"/v1.*/; do
	[ "${TOOLS_PREVIOUS:-0}" = 1 ] || break
	pver=$(cd "$prev" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	pbin=$bin/$pver
	pwant=$(cat "$prev/go.mod" "$prev/go.sum" "$here/build.sh" | sha256sum | cut -d' ' -f1)
	pmissing=0
	for t in kube-apiserver kube-controller-manager kube-scheduler kubeadm; do [ -x "$pbin/$t" ] || pmissing=1; done
	if [ "$pwant" = "$(cat "$pbin/.tools-stamp" 2>/dev/null || true)" ] && [ $pmissing = 0 ]; then
		continue
	fi
	pmajor=${pver#v}; pmajor=${pmajor%%.*}
	pminor=${pver#v*.}; pminor=${pminor%%.*}
	pflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		pflags+=" -X $pkg.gitVersion=$pver -X $pkg.gitMajor=$pmajor -X $pkg.gitMinor=$pminor -X $pkg.gitTreeState=clean"
	done
	mkdir -p "$pbin"
	t0=$(date +%s)
	echo "hack/tools: building kube-apiserver, kube-controller-manager, kube-scheduler and kubeadm ($pver)" >&2
	# One go build for the four: their packages are loaded once and their
	# links share the build's parallelism (-o DIR/ names each binary after
	# its package).
	(cd "$prev" && go build -trimpath -ldflags "$pflags" -o "$pbin/" k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubeadm)
	echo "$pwant" > "$pbin/.tools-stamp"
	echo "hack/tools: $pver's control plane built in $(( $(date +%s) - t0 ))s" >&2
done

want=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/cmd/etcd/main.go" | sha256sum | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
missing=0
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || missing=1; done
if [ "$want" = "$have" ] && [ $missing = 0 ]; then
	exit 0
fi

# The Kubernetes version is read from the pin so that the binaries report it
# (otherwise they say v0.0.0-master and kubeadm refuses to work with them).
kver=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
major=${kver#v}; major=${major%%.*}
minor=${kver#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

mkdir -p "$bin"
start=$(date +%s)
cd "$here"
# One go build for the Kubernetes commands, as for the previous minor above;
# etcd on its own, without the Kubernetes version stamps.
echo "hack/tools: building kube-apiserver, kube-controller-manager, kube-scheduler, kubeadm and kubectl ($kver)" >&2
go build -trimpath -ldflags "$ldflags" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl
echo "hack/tools: building etcd" >&2
go build -trimpath -ldflags "-s -w" -o "$bin/etcd" ./cmd/etcd
echo "$want" > "$stamp"
echo "hack/tools: all tools built in $(( $(date +%s) - start ))s" >&2
