package kubelet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/emulator/registry"
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

// registryCalls counts the manifest requests the kubelet makes and fails
// them while the registry is down.
type registryCalls struct {
	Images
	n    int
	down bool
}

func (r *registryCalls) Lookup(ctx context.Context, ref string) (*registry.Manifest, error) {
	r.n++
	if r.down {
		return nil, errors.New("dial tcp 127.0.0.1:5000: connect: connection refused")
	}
	return r.Images.Lookup(ctx, ref)
}

// An image already on the node is used as it is unless the container's
// policy is Always: its registry is not asked, so a registry that is down
// does not stop a container whose image the node has. Under Never an image
// the node lacks is not pulled at all.
func TestImageOnTheNodeIsPulledAgainOnlyUnderAlways(t *testing.T) {
	ctx := context.Background()
	reg := &registryCalls{Images: startRegistry(t)}
	k := &Kubelet{cfg: Config{Images: reg, Host: win2022}, images: map[string]*registry.Manifest{}}
	const iis2022 = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"

	_, err := k.pull(ctx, iis2022, corev1.PullNever, false)
	if f, ok := err.(*ContainerFailure); !ok || f.Reason != "ErrImageNeverPull" || f.Message != `Container image "`+iis2022+`" is not present with pull policy of Never` || reg.n != 0 {
		t.Fatalf("Never, image absent: %v after %d registry requests, want ErrImageNeverPull and none", err, reg.n)
	}
	first, err := k.pull(ctx, iis2022, corev1.PullIfNotPresent, false)
	if err != nil || reg.n != 1 {
		t.Fatalf("IfNotPresent, image absent: %v after %d registry requests, want a pull", err, reg.n)
	}

	reg.down = true
	for _, policy := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
		p, err := k.pull(ctx, iis2022, policy, false)
		if err != nil || p.ImageID != first.ImageID {
			t.Errorf("%s, image present, registry down: %v (image %v), want the node's image %s", policy, err, p, first.ImageID)
		}
	}
	if reg.n != 1 {
		t.Errorf("%d registry requests for an image the node has, want none after the first", reg.n)
	}
	_, err = k.pull(ctx, iis2022, corev1.PullAlways, false)
	if f, ok := err.(*ContainerFailure); !ok || f.Reason != "ErrImagePull" || reg.n != 2 {
		t.Errorf("Always, registry down: %v after %d registry requests, want ErrImagePull from a second", err, reg.n)
	}
	// A pod made without the API server names no policy: a tag other
	// than latest defaults to IfNotPresent, latest to Always.
	if _, err := k.pull(ctx, iis2022, "", false); err != nil || reg.n != 2 {
		t.Errorf("no policy, tag ltsc2022: %v after %d registry requests, want the node's image", err, reg.n)
	}
	reg.down = false
	if _, err := k.pull(ctx, "mcr.microsoft.com/windows/servercore/iis", "", false); err != nil || reg.n != 3 {
		t.Errorf("no policy, no tag: %v after %d registry requests, want a pull", err, reg.n)
	}
	if _, err := k.pull(ctx, "mcr.microsoft.com/windows/servercore/iis:latest", "", false); err != nil || reg.n != 4 {
		t.Errorf("no policy, tag latest, present: %v after %d registry requests, want a pull again", err, reg.n)
	}

	// What the node has is still checked against its build: a 2019 image
	// pulled for a HostProcess container does not run isolated on 2022.
	const iis2019 = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"
	if _, err := k.pull(ctx, iis2019, corev1.PullIfNotPresent, true); err != nil {
		t.Fatalf("a 2019 image for a HostProcess container: %v", err)
	}
	_, err = k.pull(ctx, iis2019, corev1.PullIfNotPresent, false)
	if f, ok := err.(*ContainerFailure); !ok || f.Reason != "CreateContainerError" || reg.n != 5 {
		t.Errorf("the 2019 image isolated on 2022, from the node: %v after %d registry requests, want CreateContainerError and no request", err, reg.n)
	}
}
