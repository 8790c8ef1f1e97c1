package machines

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/metricsserver"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// modelledServers is the node's kubelet's Serve: what a container whose
// image's process the runtime models serves on its port. Today that is
// metrics-server's API, on its --secure-port.
//
// The cluster is looked up when a container starts, not when the kubelet
// does: a worker resumed from its disk boots before its control plane's
// cluster is known here, and a kubelet that kept "no cluster" would serve
// the plain page on metrics-server's HTTPS port for good (its liveness
// probe failing, the container restarted forever).
func (r *Runtime) modelledServers(m *machine) kubelet.ServeFunc {
	return func(ctx context.Context, pod *corev1.Pod, c corev1.Container, port int32) (http.Handler, *tls.Config) {
		if registry.Canonical(c.Image) != registry.Canonical(registry.MetricsServerImage) {
			return nil, nil
		}
		r.mu.Lock()
		wc := r.clusters[m.endpoint]
		r.mu.Unlock()
		if wc == nil {
			m.logs.Write(vmdisk.Containerd, "%s/%s %s: metrics-server: the cluster's control plane is not run here yet: its port serves the simulated page until the container restarts", pod.Namespace, pod.Name, c.Name)
			return nil, nil
		}
		who := fmt.Sprintf("%s/%s %s", pod.Namespace, pod.Name, c.Name)
		args, err := metricsserver.ParseArgs(append(append([]string{}, c.Command...), c.Args...))
		if err != nil {
			m.logs.Write(vmdisk.Containerd, "%s: metrics-server: %v", who, err)
			return nil, nil
		}
		if int(port) != args.SecurePort {
			return nil, nil
		}
		admin, err := kubernetes.NewForConfig(wc.admin)
		if err != nil {
			return nil, nil
		}
		args.API = serviceAccountConfig(wc.admin, admin, pod)
		dial := r.nodeDial(m)
		args.Dial = func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) }
		args.Log = r.opts.Log.WithName("metrics-server").WithValues("pod", pod.Namespace+"/"+pod.Name)
		srv, err := metricsserver.New(args.Options)
		if err != nil {
			m.logs.Write(vmdisk.Containerd, "%s: metrics-server: %v", who, err)
			return nil, nil
		}
		go func() {
			if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
				m.logs.Write(vmdisk.Containerd, "%s: metrics-server stopped: %v", who, err)
			}
		}()
		m.logs.Write(vmdisk.Containerd, "%s: metrics-server serving metrics.k8s.io/v1beta1 on port %d, scraping kubelets every %s", who, port, args.MetricResolution)
		return srv, srv.TLSConfig()
	}
}

// metricsServerStart is what metrics-server does with its command line as
// it starts: invalid flags end it (cmd/metrics-server/app/start.go
// returns Validate's first error, which main panics with: exit code 2).
func metricsServerStart(c *corev1.Container) error {
	if registry.Canonical(c.Image) != registry.Canonical(registry.MetricsServerImage) {
		return nil
	}
	if _, err := metricsserver.ParseArgs(append(append([]string{}, c.Command...), c.Args...)); err != nil {
		return &kubelet.Exited{Code: 2, Message: "panic: " + err.Error()}
	}
	return nil
}

// serviceAccountConfig is the API server as the pod's service account
// sees it: the token the kubelet would project into the pod (a
// TokenRequest bound to the pod, one hour, renewed before it expires),
// minted with the runtime's administrator client. The process reaches the
// API server where the runtime does, not through the kubernetes Service.
// ServiceAccountConfig is serviceAccountConfig, for the local world's
// processes that stand in for a pod (the workload admission).
func ServiceAccountConfig(adminCfg *rest.Config, admin kubernetes.Interface, pod *corev1.Pod) *rest.Config {
	return serviceAccountConfig(adminCfg, admin, pod)
}

func serviceAccountConfig(adminCfg *rest.Config, admin kubernetes.Interface, pod *corev1.Pod) *rest.Config {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	mint := tokenSource(func() (*oauth2.Token, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tr, err := admin.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("service account %s/%s token: %w", pod.Namespace, sa, err)
		}
		// Renewed a few minutes early, as the kubelet renews at 80%.
		return &oauth2.Token{AccessToken: tr.Status.Token, TokenType: "Bearer", Expiry: tr.Status.ExpirationTimestamp.Add(-12 * time.Minute)}, nil
	})
	cfg := rest.AnonymousClientConfig(adminCfg)
	cfg.WrapTransport = transport.TokenSourceWrapTransport(oauth2.ReuseTokenSource(nil, mint))
	return cfg
}

// podClient is the API server as a pod's processes reach it, with its
// ServiceAccount's token.
func podClient(adminCfg *rest.Config, admin kubernetes.Interface) func(pod *corev1.Pod) (kubernetes.Interface, error) {
	return func(pod *corev1.Pod) (kubernetes.Interface, error) {
		return kubernetes.NewForConfig(serviceAccountConfig(adminCfg, admin, pod))
	}
}

type tokenSource func() (*oauth2.Token, error)

func (f tokenSource) Token() (*oauth2.Token, error) { return f() }
