package machines_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/poll"
)

// unreachable is containerd's failure to reach a registry's port 443.
var unreachable = regexp.MustCompile(`^failed to pull and unpack image "[^"]+": failed to resolve reference "[^"]+": failed to do request: Head "https://[^"]+/v2/[^"]+/manifests/[^"]+": dial tcp [0-9.]+:443: i/o timeout$`)

// backOffPrefix is how the kubelet words the same error while it backs
// off (Back-off pulling image "<ref>": ErrImagePull: <error>): which of the
// two a poll sees first is a matter of timing.
var backOffPrefix = regexp.MustCompile(`^Back-off pulling image "[^"]+": ErrImagePull: `)

// privateSubnet: a worker on a subnet with no way to the internet joins
// (the API server is in its VNet) but pulls no image: its pods wait in
// ErrImagePull as containerd's dial to the registry times out, and its
// containerd log says so. Once the NAT gateway is attached to the subnet
// the same node pulls, its network comes up and it is Ready.
func (m *mixed) privateSubnet(t *testing.T, ctx context.Context) {
	t.Helper()
	name := "mixed-md-0-pr1v8"
	data := bootstrapData(t, ctx, m.cluster, name, false, m.template("mixed-md-0"))
	m.azure.vm(t, ctx, virtualmachines.Spec{Name: name, ComputerName: name, CustomData: data, Image: resolveImage(t, images.Request{OS: infrav1.Linux})}, m.azure.privateSubnet)
	pullFailure := func(p *corev1.Pod) string {
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			// The first failure shows ErrImagePull, a sync in the back-off
			// ImagePullBackOff carrying the same error.
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				return backOffPrefix.ReplaceAllString(w.Message, "")
			}
		}
		return ""
	}
	var failed string
	poll.Until(t, 3*time.Minute, func() string {
		pods, err := m.workload.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return err.Error()
		}
		for i := range pods.Items {
			if msg := pullFailure(&pods.Items[i]); msg != "" {
				if !unreachable.MatchString(msg) {
					t.Fatalf("pod %s: ErrImagePull %q, want containerd's dial timeout to the registry", pods.Items[i].Name, msg)
				}
				failed = pods.Items[i].Name
				return ""
			}
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				t.Fatalf("pod %s runs on %s, whose subnet has no outbound path", pods.Items[i].Name, name)
			}
		}
		return "no pod on " + name + " in ErrImagePull yet"
	})
	var dir string
	for _, n := range rt.Nodes() {
		if n.NodeName == name {
			dir = n.Dir
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "root", vmdisk.LogPath(false, vmdisk.Containerd)))
	if err != nil || !regexp.MustCompile(`PullImage .* failed: ErrImagePull: failed to pull and unpack image .*i/o timeout`).Match(log) {
		t.Errorf("the node's containerd log does not carry the failed pull of %s (%v):\n%s", failed, err, log)
	}

	m.azure.attachNAT(t, ctx, "private")
	poll.Until(t, 3*time.Minute, func() string {
		n, err := m.workload.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ok, msg := nodeReady(n); !ok {
			return "node behind the NAT gateway not Ready: " + msg
		}
		p, err := m.workload.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name + ",metadata.name=" + failed})
		if err != nil || len(p.Items) != 1 || p.Items[0].Status.Phase != corev1.PodRunning {
			return "pod " + failed + " not running yet"
		}
		return ""
	})
	m.azure.deleteVM(t, ctx, name)
	// The cloud controller's node lifecycle deletes a Node whose VM is gone
	// (cloudprovider.syncNode), and may do it before this line does.
	if err := m.workload.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
