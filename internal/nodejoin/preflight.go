package nodejoin

import (
	"fmt"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// Severity of a finding: an error stops the join, a warning is printed.
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one preflight or post-join problem and what to change.
type Finding struct {
	Check    string
	Severity Severity
	Problem  string
	Fix      string
	// addon: a Windows add-on the cluster lacks, which --apply-addons
	// applies.
	addon bool
}

func (f Finding) String() string {
	return fmt.Sprintf("%s [%s]: %s; fix: %s", f.Severity, f.Check, f.Problem, f.Fix)
}

// MaxComputerName is the NetBIOS limit on a Windows computer name: a
// longer host name is cut in NetBIOS and breaks the node's identity.
const MaxComputerName = 15

// Machine is what the cluster-side preflight knows of the machine to join.
type Machine struct {
	// Name is its host name, which becomes the node's name.
	Name           string
	WindowsVersion infrav1.WindowsServerVersion
}

// Preflight checks, on the cluster's side, that machine m can join cluster
// c.
func Preflight(c *Cluster, m Machine) []Finding {
	var out []Finding
	add := func(check string, sev Severity, problem, fix string) {
		out = append(out, Finding{Check: check, Severity: sev, Problem: problem, Fix: fix})
	}
	if c.ClusterInfoMissing {
		add("cluster-info", Error, "kube-public/cluster-info does not exist, so a bootstrap token cannot discover the cluster (not made by kubeadm init, or its bootstrap-token phase was skipped)",
			"run 'kubeadm init phase bootstrap-token' on a control-plane node")
	}
	if len(c.MissingBindings) > 0 {
		add("bootstrap-rbac", Error, fmt.Sprintf("ClusterRoleBinding %s is missing or does not name group %s: the node's bootstrap token cannot post or get its CSR approved", strings.Join(c.MissingBindings, ", "), NodeTokenGroup),
			"run 'kubeadm init phase bootstrap-token' on a control-plane node")
	}
	switch {
	case m.Name == "":
		add("hostname", Error, "the machine's host name is not known", "name the machine (the node takes its host name)")
	case len(m.Name) > MaxComputerName:
		add("hostname", Error, fmt.Sprintf("host name %q has %d characters: Windows computer names are at most %d (NetBIOS), and a longer one is cut", m.Name, len(m.Name), MaxComputerName),
			fmt.Sprintf("rename the machine to %d characters or fewer: Rename-Computer -NewName NAME -Restart", MaxComputerName))
	case c.Nodes[strings.ToLower(m.Name)]:
		add("hostname", Error, fmt.Sprintf("a node named %s is already in the cluster", strings.ToLower(m.Name)),
			"rename the machine, or if that node is this machine's old registration, remove it first: winkube node leave (or kubectl delete node)")
	}
	if _, ok := images.WindowsBuild[m.WindowsVersion]; !ok {
		add("windows-version", Error, fmt.Sprintf("Windows Server %q is not a release winkube joins", m.WindowsVersion), "use Windows Server 2019, 2022 or 2025")
	} else if ok, why := images.WindowsSupported(m.WindowsVersion, c.Version); !ok {
		add("windows-version", Error, why+fmt.Sprintf(" (the cluster runs %s)", c.GitVersion), "use Windows Server 2022 or 2025 for this Kubernetes version")
	}
	if !c.Version.AtLeast(1, images.HostProcessMinor) {
		add("kubernetes-version", Error, fmt.Sprintf("the cluster runs %s: Windows nodes with containerd need HostProcess containers (Kubernetes v1.%d+) for kube-proxy and the CNI", c.GitVersion, images.HostProcessMinor),
			"upgrade the cluster first")
	}
	switch {
	case c.CNI.Name == "":
		add("windows-cni", Error, "no pod network that supports Windows was found (no calico-node or flannel DaemonSet)",
			fmt.Sprintf("install Calico with IPAM strictAffinity and VXLAN, or flannel with backend vxlan, VNI %d and port %d, before joining Windows nodes", WindowsVNI, WindowsVXLANPort))
	default:
		for _, p := range c.CNI.Problems {
			add("windows-cni", Error, c.CNI.Name+" ("+c.CNI.Source+"): "+p, "change the CNI's configuration as the problem says")
		}
		if c.CNI.WindowsDaemonSet == "" {
			add("windows-cni", Error, c.CNI.Name+" has no Windows DaemonSet (nodeSelector kubernetes.io/os: windows): the node would stay NotReady",
				"rerun with "+ApplyAddonsFlag+" to apply the one winkube's flavors deliver, or apply the CNI's Windows DaemonSet at the version of its Linux one yourself (Calico: the tigera operator's Installation with a Windows dataplane; flannel: kube-flannel-ds-windows)")
			out[len(out)-1].addon = true
		}
		if c.CNI.Name == "calico" && m.WindowsVersion == infrav1.WindowsServer2025 {
			add("windows-cni", Warning, "Calico lists only Windows Server 2019 and 2022 as supported for Windows nodes (projectcalico/calico #11691)",
				"use Windows Server 2022 for Calico, or accept an unsupported combination")
		}
	}
	want := kubeProxyTag(c.GitVersion)
	switch tag := imageTag(c.KubeProxyWindows); {
	case c.KubeProxyWindows == "":
		add("kube-proxy-windows", Error, "kube-system/kube-proxy-windows does not exist: Services would not work on the node",
			"rerun with "+ApplyAddonsFlag+" to apply it at the cluster's version, or apply kube-proxy-windows (a HostProcess DaemonSet) with image sigwindowstools/kube-proxy:"+want+"-calico-hostprocess yourself")
		out[len(out)-1].addon = true
	case c.KubeProxyWindows != "" && !strings.HasPrefix(tag, want+"-") && tag != want:
		add("kube-proxy-windows", Error, fmt.Sprintf("kube-system/kube-proxy-windows runs image %s, not the cluster's version %s (Cluster API and kubeadm upgrade only the Linux kube-proxy)", c.KubeProxyWindows, want),
			"set the DaemonSet's image tag to "+want+" with its suffix (for example "+want+"-calico-hostprocess)")
	}
	return out
}

// ApplyAddonsFlag is the flag that lets a join apply the Windows add-ons
// the cluster lacks.
const ApplyAddonsFlag = "--apply-addons"

// onlyMissingAddons reports whether every error in fs is a Windows add-on
// the cluster lacks, so that applying them may let the join go on.
func onlyMissingAddons(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == Error && !f.addon {
			return false
		}
	}
	return true
}

// Failed reports whether fs hold an error.
func Failed(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == Error {
			return true
		}
	}
	return false
}

// kubeProxyTag is the release part of the cluster's version ("v1.34.2"
// from "v1.34.2+k3s1" or "v1.34.2-eks-1").
func kubeProxyTag(gitVersion string) string {
	if i := strings.IndexAny(gitVersion, "+-"); i >= 0 {
		return gitVersion[:i]
	}
	return gitVersion
}

func imageTag(image string) string {
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return ""
}
