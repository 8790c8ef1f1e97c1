package doctor

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLoadBalancers(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "lbs")
	c.windowsNode("win-lb")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		Selector: map[string]string{"app": "iis"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	c.create(svc, nil)
	lb := func() []Finding { return only(LoadBalancers(c.state()), "load-balancers") }
	expect(t, "no cloud-controller-manager", lb(), 1, Error, "Service/lbs/iis", "no external IP", "no cloud-controller-manager", "cloud-provider: azure")

	ccm := c.pod("kube-system", "cloud-controller-manager-x", "win-lb", map[string]string{"component": "cloud-controller-manager"},
		corev1.PodSpec{Containers: []corev1.Container{{Name: "cloud-controller-manager", Image: "mcr.microsoft.com/oss/kubernetes/azure-cloud-controller-manager:v1.36.0"}}}, false)
	expect(t, "cloud-controller-manager not ready", lb(), 1, Error, "not Running and Ready")

	c.update(ccm, func() { setReady(ccm, true, nil) })
	expect(t, "waiting", lb(), 1, Info, "waiting for its external IP")

	old := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis.1"}, Reason: "SyncLoadBalancerFailed", Type: corev1.EventTypeWarning,
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: ns, Name: "iis", UID: svc.UID}, Message: "an older failure",
		LastTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))}
	newer := old.DeepCopy()
	newer.Name, newer.Message, newer.LastTimestamp = "iis.2", "PublicIPCountLimitReached: the subscription's quota", metav1.Now()
	other := old.DeepCopy()
	other.Name, other.InvolvedObject.UID, other.Message, other.LastTimestamp = "iis.3", "a-deleted-service-uid", "a Service of the same name before", metav1.NewTime(time.Now().Add(time.Minute))
	c.create(old, nil)
	c.create(newer, nil)
	c.create(other, nil)
	expect(t, "newest failure of this Service", lb(), 1, Error, "PublicIPCountLimitReached")

	// An address, pods selected but none Ready: the IP answers nothing.
	c.update(svc, func() { svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.1.0.9"}} })
	pod := c.pod(ns, "iis-0", "win-lb", map[string]string{"app": "iis"}, corev1.PodSpec{}, false)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iis-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "iis"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.168.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}}}
	c.create(slice, nil)
	expect(t, "no ready endpoint", lb(), 1, Error, "127.1.0.9", "no ready endpoint", "iis-0")

	c.update(pod, func() { setReady(pod, true, nil) })
	c.update(slice, func() { slice.Endpoints[0].Conditions.Ready = ptr.To(true) })
	expect(t, "serving", lb(), 0, Error)
}

// TestLoadBalancerFailuresTable: every row of the table explains its own
// words (no earlier row shadows it), and other failures get nothing.
func TestLoadBalancerFailuresTable(t *testing.T) {
	for i, e := range loadBalancerFailures {
		for _, s := range e.says {
			msg := "ensure(default/web): failed: " + s + ": details"
			if why, fix := ExplainLoadBalancerFailure(msg); why != e.why || fix != e.fix {
				t.Errorf("row %d: %q is explained as %q", i, s, why)
			}
		}
	}
	if why, fix := ExplainLoadBalancerFailure("context deadline exceeded"); why != "" || fix != "" {
		t.Errorf("an unrelated failure is explained: %q %q", why, fix)
	}
}
