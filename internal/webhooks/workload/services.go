package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ServicesPath serves the Service check.
const ServicesPath = "/validate-services"

// MaxOldWindowsBackends: Windows before 17763.2746 (2019 without the 2022-03
// update) load-balances a Service over at most 64 destinations per node
// (microsoft/Windows-Containers#93, kubernetes/kubernetes#98680); later
// builds raised the limit to 1024.
const (
	MaxOldWindowsBackends = 64
	FixedRevision         = 2746
)

// Services warns when a Service would have more Windows backends than old
// Windows nodes can balance over.
func (a *Admission) Services() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return admission.Allowed("")
		}
		svc := &corev1.Service{}
		if err := a.decoder.DecodeRaw(req.Object, svc); err != nil || len(svc.Spec.Selector) == 0 || a.Reader == nil {
			return admission.Allowed("")
		}
		pods := &corev1.PodList{}
		if err := a.Reader.List(ctx, pods, client.InNamespace(req.Namespace), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(svc.Spec.Selector)}); err != nil {
			return admission.Allowed("")
		}
		windows := 0
		nodes := map[string]bool{}
		for i := range pods.Items {
			if IsWindows(&pods.Items[i].Spec) {
				windows++
				if n := pods.Items[i].Spec.NodeName; n != "" {
					nodes[n] = true
				}
			}
		}
		if windows <= MaxOldWindowsBackends {
			return admission.Allowed("")
		}
		for n := range nodes {
			node := &corev1.Node{}
			if a.Reader.Get(ctx, client.ObjectKey{Name: n}, node) != nil {
				continue
			}
			if OldWindowsLoadBalancer(node.Status.NodeInfo.KernelVersion) {
				return admission.Allowed("").WithWarnings(fmt.Sprintf(
					"Service %s has %d Windows backends, but node %s runs Windows %s, which balances over at most %d: update it to 10.0.17763.%d or later, or spread the backends over several Services",
					svc.Name, windows, n, node.Status.NodeInfo.KernelVersion, MaxOldWindowsBackends, FixedRevision))
			}
		}
		return admission.Allowed("")
	})
}

// OldWindowsLoadBalancer reports a Windows Server 2019 kernel before
// revision 2746, whose load balancer takes at most 64 destinations.
func OldWindowsLoadBalancer(kernel string) bool {
	parts := strings.Split(kernel, ".")
	if len(parts) < 4 || parts[2] != "17763" {
		return false
	}
	rev, err := strconv.Atoi(strings.Fields(parts[3])[0])
	return err == nil && rev < FixedRevision
}
