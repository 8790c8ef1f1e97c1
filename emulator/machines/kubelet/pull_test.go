package kubelet

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/internal/poll"
)

// imagePullBacksOff is seed 002's ccauth pod: an image in no registry,
// hostPort 80, restartPolicy Never. The pull fails as Docker Hub refuses a
// repository that does not exist, the next sync is in the kubelet's
// back-off and says ImagePullBackOff with the pull's error, and the pod
// stays Pending whatever its restart policy: it never started.
func imagePullBacksOff(t *testing.T, n *servingNode) {
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ccauth", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.node, RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "ccauth", Image: "ccauth", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}}},
	}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const denied = `failed to pull and unpack image "docker.io/library/ccauth:latest": failed to resolve reference "docker.io/library/ccauth:latest": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`
	seen := map[string]bool{}
	poll.Until(t, time.Minute, func() string {
		got, err := n.client.CoreV1().Pods("default").Get(ctx, "ccauth", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if got.Status.Phase != corev1.PodPending {
			t.Fatalf("ccauth is %s, want Pending", got.Status.Phase)
		}
		for _, cs := range got.Status.ContainerStatuses {
			w := cs.State.Waiting
			switch {
			case w == nil:
			case w.Reason == "ErrImagePull" && w.Message == denied:
				seen["ErrImagePull"] = true
			case w.Reason == "ImagePullBackOff" && w.Message == `Back-off pulling image "ccauth": ErrImagePull: `+denied:
				seen["ImagePullBackOff"] = true
			default:
				t.Fatalf("ccauth waits %s: %s", w.Reason, w.Message)
			}
		}
		if !seen["ImagePullBackOff"] {
			return "ccauth not yet in ImagePullBackOff"
		}
		return ""
	})

	// A repository that exists without the tag: the registry's 404.
	p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "no-tag", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.node, Containers: []corev1.Container{{Name: "nginx", Image: "nginx:9.9"}},
	}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		got, err := n.client.CoreV1().Pods("default").Get(ctx, "no-tag", metav1.GetOptions{})
		if err != nil || len(got.Status.ContainerStatuses) == 0 || got.Status.ContainerStatuses[0].State.Waiting == nil {
			return "no-tag has no waiting container yet"
		}
		if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; !strings.HasSuffix(msg, `"docker.io/library/nginx:9.9": docker.io/library/nginx:9.9: not found`) {
			t.Fatalf("nginx:9.9 waits with %q", msg)
		}
		return ""
	})
}
