package doctor

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/webhooks/workload"
	"github.com/winkube/winkube/windowslimits"
)

// A Windows node refuses little of what Windows cannot do: the API server
// refuses Linux-only fields only for pods that set spec.os.name: windows,
// and the kubelet and containerd on Windows drop the rest without a word
// (kubernetes.io "Windows containers in Kubernetes", API compatibility;
// kubelet v1.36.3 kuberuntime_container_windows.go, kubelet_pods.go
// translateMountPropagation; containerd helpers.go hostNetwork). What is
// dropped is what surprises: a pod that runs, but not as written. Each
// limit is a row of windowslimits, which says what the node does and how
// to write the pod instead; the simulated kubelet and admission read the
// same rows.

// windowsLimit is one thing a Windows node does not do as asked.
type windowsLimit struct {
	severity Severity
	// what the pod asks, what the node does, and how to fix it.
	what, does, fix string
}

// severityOf is how bad a row is: a pod the node refuses or cannot run
// is an error; one that runs, but not as written, a warning.
func severityOf(r *windowslimits.Row) Severity {
	switch r.Kubelet {
	case windowslimits.Rejects, windowslimits.FailsContainer, windowslimits.Unschedulable:
		return Error
	}
	return Warning
}

// windowsLimits are the limits a pod spec meets on a Windows node: the
// table's rows, but for the Secrets on disk, which SecretsOnWindows
// explains.
func windowsLimits(p *corev1.Pod) []windowsLimit {
	var out []windowsLimit
	// A OneLine row's hits go to the line of its first hit.
	line := map[*windowslimits.Row]int{}
	together := map[*windowslimits.Row][]windowslimits.Hit{}
	for _, h := range windowslimits.Find(windowslimits.PodTarget(p)) {
		if h.Row.ID == secretOnDisk {
			continue
		}
		if h.Row.OneLine == "" {
			out = append(out, windowsLimit{severityOf(h.Row), h.What, h.Row.Explain, h.Row.Fix})
			continue
		}
		if _, ok := line[h.Row]; !ok {
			line[h.Row] = len(out)
			out = append(out, windowsLimit{severityOf(h.Row), "", h.Row.Explain, h.Row.Fix})
		}
		together[h.Row] = append(together[h.Row], h)
	}
	for r, i := range line {
		out[i].what = r.OneLine + " " + windowslimits.WhatAll(together[r])
	}
	return out
}

const secretOnDisk = "secret-on-disk"

// WindowsPodLimits reports pods on Windows nodes, or meant for them, that
// ask for what Windows does not do, once per owner and limit.
func WindowsPodLimits(s *State) []Finding {
	seen := map[string]bool{}
	var out []Finding
	for i := range s.Pods {
		p := &s.Pods[i]
		node := s.node(p.Spec.NodeName)
		if node != nil && !isWindowsNode(node) || node == nil && !workload.IsWindows(&p.Spec) {
			continue
		}
		kind, name := "Pod", p.Name
		if len(p.OwnerReferences) > 0 {
			kind, name = p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name
		}
		for _, l := range windowsLimits(p) {
			key := kind + "/" + p.Namespace + "/" + name + "/" + l.what
			if seen[key] {
				continue
			}
			seen[key] = true
			where := "a Windows node"
			if node != nil {
				where = "Windows node " + node.Name
			}
			out = append(out, Finding{Check: "windows-pod-limits", Severity: l.severity, Object: ref(kind, p.Namespace, name),
				Message: fmt.Sprintf("pod %s/%s on %s: %s %s", p.Namespace, p.Name, where, l.what, l.does),
				Fix:     l.fix})
		}
	}
	return out
}
