package localworld

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// Catalog is what the local world's registry publishes: the workload
// images the emulator's catalog holds, and winkube's own admission image.
func Catalog(kubernetesVersion string, kubeadmImages []string) []registry.Image {
	return append(registry.Catalog(kubernetesVersion, kubeadmImages), admissionImage())
}

// admissionImage is the admission Deployment's image in the local
// registry, so that its pods start on the machines as any other; its
// process serves the webhooks on 9443, where the readiness probe looks.
func admissionImage() registry.Image {
	return registry.Image{Ref: flavors.AdmissionImage(), Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}}, Listens: []string{"9443/tcp"}}
}

// serveAdmission serves the workload cluster's admission in this process
// while the admission Deployment that the ClusterResourceSet delivered has
// a running pod, as the machine runtime's cloud controller serves the
// cloud. The machine runtime does not route Service cluster IPs, so the
// API server reaches this server at https://localhost:PORT rather than
// through the Service: the webhook configurations say so. It returns when
// ctx ends.
func (w *World) serveAdmission(ctx context.Context) {
	type server struct {
		cancel context.CancelFunc
		done   chan error
		// pod is the admission pod whose ServiceAccount token the
		// server acts with.
		pod types.UID
	}
	var srv *server
	halt := func() {
		if srv != nil {
			srv.cancel()
			if err := <-srv.done; err != nil && !errors.Is(err, context.Canceled) {
				w.opts.Log.Error(err, "workload admission failed as it stopped")
			}
			srv = nil
		}
	}
	defer halt()
	for {
		var exited chan error
		if srv != nil {
			exited = srv.done
		}
		select {
		case <-ctx.Done():
			return
		case err := <-exited:
			w.opts.Log.Error(err, "workload admission stopped; starting it again")
			srv.cancel()
			srv = nil
		case <-time.After(2 * time.Second):
		}
		cfg, _, err := w.Workload(ctx)
		if err != nil {
			continue // no workload cluster yet
		}
		pod, err := admissionRunning(ctx, cfg)
		if err != nil {
			continue
		}
		if srv != nil && (pod == nil || pod.UID != srv.pod) {
			// Its token is bound to a pod that is gone.
			halt()
		}
		if pod != nil && srv == nil {
			scfg, err := podConfig(cfg, pod)
			if err != nil {
				continue
			}
			sctx, cancel := context.WithCancel(ctx)
			srv = &server{cancel: cancel, done: make(chan error, 1), pod: pod.UID}
			go func(done chan error) { done <- w.runAdmission(sctx, scfg) }(srv.done)
			w.opts.progress("workload admission: serving the winkube-admission pods' webhooks in this process, with the pod's ServiceAccount token")
		}
	}
}

// admissionRunning is a running pod of the admission Deployment, the
// oldest; nil when none runs.
func admissionRunning(ctx context.Context, cfg *rest.Config) (*corev1.Pod, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(flavors.AdmissionNamespace), client.MatchingLabels{"app.kubernetes.io/name": "winkube-admission"}); err != nil {
		return nil, err
	}
	var out *corev1.Pod
	for i, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil &&
			(out == nil || p.CreationTimestamp.Before(&out.CreationTimestamp) || (p.CreationTimestamp.Equal(&out.CreationTimestamp) && p.Name < out.Name)) {
			out = &pods.Items[i]
		}
	}
	return out, nil
}

// podConfig is the API server as a pod's process reaches it: a token of
// its ServiceAccount bound to the pod, renewed before it expires, as the
// kubelet projects it. The admission then has the rights the add-on's
// RBAC gives it on a cluster (flavors.AdmissionObjects), not the
// workload's admin's.
func podConfig(admin *rest.Config, pod *corev1.Pod) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	return machines.ServiceAccountConfig(admin, cs, pod), nil
}

func (w *World) runAdmission(ctx context.Context, cfg *rest.Config) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	r := workload.NewResolver()
	r.Mirror = w.reg.Host()
	return workload.Serve(ctx, workload.ServerOptions{
		Config: cfg, Host: "127.0.0.1", Port: port, CertDir: filepath.Join(w.opts.StateDir, "admission"), DNSNames: []string{"localhost"},
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://localhost:%d", port))},
		CASecret:     client.ObjectKey{Namespace: flavors.AdmissionNamespace, Name: flavors.AdmissionCASecret},
		Install:      true, Resolver: r, Logger: w.opts.Log.WithName("admission"),
		// The ClusterResourceSet delivers the configurations with the
		// Service when it first applies: point them back here quickly.
		Resync: 2 * time.Second,
	})
}

// WaitAdmissionServed waits until the workload cluster's placement webhook
// points at the admission this process serves for it: pods created after
// that are placed by their images' builds.
func (w *World) WaitAdmissionServed(ctx context.Context) error {
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: workload.PlacementWebhookName}, m); err != nil {
			last = err.Error()
			return false, nil
		}
		u := m.Webhooks[0].ClientConfig.URL
		if u == nil || !strings.HasPrefix(*u, "https://localhost:") || len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			last = "the webhook does not point at this process yet"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("workload admission not served: %s: %w", last, err)
	}
	return nil
}
