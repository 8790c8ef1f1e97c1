package machines

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/hostproc"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// The metrics-server add-on's pod runs the real metrics-server: the
// binary hack/tools builds from sigs.k8s.io/metrics-server at the version
// of the add-on's image (registry.MetricsServerImage), started by the
// node's kubelet as the container's process. Being the real one, it
// serves metrics.k8s.io as every k8s.io/apiserver server does, aggregated
// discovery included, and scrapes the kubelets' /metrics/resource as it
// scrapes real ones.
//
// What the container would have and a process on the host does not is
// given to it in a directory of its own (programDir):
//   - the service account token and CA the kubelet projects at
//     /var/run/secrets/kubernetes.io/serviceaccount: written there as
//     token, ca.crt and namespace, the token renewed as the kubelet renews
//     it, and handed to the program through a kubeconfig that reads them
//     (--kubeconfig, --authentication-kubeconfig, --authorization-
//     kubeconfig), which is what its in-cluster configuration would read
//     (sigs.k8s.io/metrics-server v0.8.0 cmd/metrics-server/app/options/
//     options.go restConfig, and k8s.io/apiserver's delegating
//     authentication and authorization options, fall back to
//     rest.InClusterConfig when no kubeconfig is given);
//   - its filesystem: an absolute path a flag names (--cert-dir=/tmp, the
//     emptyDir the manifest mounts there) lives under fs/;
//   - its network: it listens on the pod's host address, where the
//     Service's endpoints lead the API server's aggregator (the pod's 0.0.0.0
//     is its pod IP only), so --bind-address is that address.
//
// Everything else in its command line is the Deployment's, as written.

// metricsServerProgram is the binary's name in Options.Bin.
const metricsServerProgram = "metrics-server"

// tokenLifetime is what the kubelet asks for a projected token (the
// service account admission's default projection, one hour), renewed at
// 80% of it as the kubelet's token manager does.
const tokenLifetime = time.Hour

// realPrograms is the node's kubelet's Run: metrics-server's binary, and
// the simulated Typha (runTypha).
//
// The cluster is looked up when a container starts, not when the kubelet
// does: a worker resumed from its disk boots before its control plane's
// cluster is known here; metrics-server's container then stays simulated
// (its HTTPS probes fail on the plain page) until the kubelet restarts
// it, and Typha's process retries until it is (startTypha).
func (r *Runtime) realPrograms(m *machine) kubelet.RunFunc {
	return func(ctx context.Context, pod *corev1.Pod, c corev1.Container, addr netip.Addr) bool {
		if isTypha(c) {
			return r.startTypha(ctx, m, pod, c, addr)
		}
		if registry.Canonical(c.Image) != registry.Canonical(registry.MetricsServerImage) {
			return false
		}
		who := fmt.Sprintf("%s/%s %s", pod.Namespace, pod.Name, c.Name)
		r.mu.Lock()
		wc := r.clusters[m.endpoint]
		r.mu.Unlock()
		if wc == nil {
			m.logs.Write(vmdisk.Containerd, "%s: metrics-server: the cluster's control plane is not run here yet: the container stays simulated until it restarts", who)
			return false
		}
		bin := filepath.Join(r.opts.Bin, metricsServerProgram)
		if _, err := os.Stat(bin); err != nil {
			m.logs.Write(vmdisk.Containerd, "%s: metrics-server: %v: build it with `make tools` (hack/tools/build.sh); the container stays simulated", who, err)
			return false
		}
		dir := filepath.Join(m.dir, "pods", string(pod.UID), c.Name)
		if err := startMetricsServer(ctx, wc, m.endpoint, pod, c, addr, bin, dir); err != nil {
			m.logs.Write(vmdisk.Containerd, "%s: metrics-server: %v", who, err)
			return false
		}
		m.logs.Write(vmdisk.Containerd, "%s: started %s on %s (its log: %s)", who, bin, addr, filepath.Join(dir, "metrics-server.log"))
		return true
	}
}

// startMetricsServer writes the container's files and starts the program;
// it ends when ctx does. The program reaches the API server through the
// cluster's endpoint, as every pod's process does (podAPIServer): the
// control-plane machine it started under may be replaced while it runs.
func startMetricsServer(ctx context.Context, wc *workloadCluster, endpoint string, pod *corev1.Pod, c corev1.Container, addr netip.Addr, bin, dir string) error {
	sa := filepath.Join(dir, "serviceaccount")
	if err := os.MkdirAll(sa, 0o700); err != nil {
		return err
	}
	viaEndpoint := wc.viaEndpoint(endpoint)
	admin, err := kubernetes.NewForConfig(viaEndpoint)
	if err != nil {
		return err
	}
	ca := wc.admin.CAData
	if len(ca) == 0 && wc.admin.CAFile != "" {
		if ca, err = os.ReadFile(wc.admin.CAFile); err != nil {
			return err
		}
	}
	expiry, err := projectToken(ctx, admin, pod, sa)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.crt": ca, "namespace": []byte(pod.Namespace)} {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o600); err != nil {
			return err
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeInClusterKubeconfig(kubeconfig, viaEndpoint.Host, sa); err != nil {
		return err
	}
	args := metricsServerArgs(append(append([]string{}, c.Command...), c.Args...), dir, addr, kubeconfig)
	logf, err := os.OpenFile(filepath.Join(dir, "metrics-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	// Only what the container's spec sets, not winkube's environment.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	// Killed with winkube, as the control-plane processes are.
	cmd.SysProcAttr = hostproc.Attr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	go func() {
		// The kubelet's token manager: a fresh token at 80% of the last
		// one's life, until the container stops.
		for {
			renew := time.Until(expiry) / 5 * 4
			if left := time.Until(expiry); left < tokenLifetime {
				renew = left * 4 / 5
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				// The container stops: SIGTERM, then SIGKILL after the
				// pod's grace period, as the runtime stops a container.
				_ = cmd.Process.Signal(syscall.SIGTERM)
				grace := 30 * time.Second
				if pod.Spec.TerminationGracePeriodSeconds != nil {
					grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
				}
				select {
				case <-done:
				case <-time.After(grace):
					_ = cmd.Process.Kill()
				}
				return
			case <-time.After(renew):
				if e, err := projectToken(ctx, admin, pod, sa); err == nil {
					expiry = e
				} else {
					expiry = time.Now().Add(time.Minute) // tried again soon
				}
			}
		}
	}()
	return nil
}

// projectToken writes the pod's service account token, bound to the pod,
// as the kubelet projects it, and says when it expires.
func projectToken(ctx context.Context, admin kubernetes.Interface, pod *corev1.Pod, dir string) (time.Time, error) {
	tr, err := boundToken(ctx, admin, pod)
	if err != nil {
		return time.Time{}, err
	}
	// Replaced whole, never seen half-written: client-go re-reads the
	// file (its cached file token source) while the program runs.
	tmp := filepath.Join(dir, ".token")
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return time.Time{}, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "token")); err != nil {
		return time.Time{}, err
	}
	return tr.Status.ExpirationTimestamp.Time, nil
}

// boundToken is the pod's service account token that the kubelet asks
// for: a TokenRequest bound to the pod, for tokenLifetime.
func boundToken(ctx context.Context, admin kubernetes.Interface, pod *corev1.Pod) (*authenticationv1.TokenRequest, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tr, err := admin.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("service account %s/%s token: %w", pod.Namespace, sa, err)
	}
	return tr, nil
}

// writeInClusterKubeconfig is rest.InClusterConfig as a kubeconfig: the
// API server where the runtime reaches it (a process on the host has no
// kubernetes Service), the projected token file and CA.
func writeInClusterKubeconfig(path, host, sa string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["in-cluster"] = &clientcmdapi.Cluster{Server: host, CertificateAuthority: filepath.Join(sa, "ca.crt")}
	cfg.AuthInfos["serviceaccount"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(sa, "token")}
	cfg.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "in-cluster", AuthInfo: "serviceaccount"}
	cfg.CurrentContext = "in-cluster"
	return clientcmd.WriteToFile(*cfg, path)
}

// metricsServerPathFlags are metrics-server's flags that name files or
// directories in its container.
var metricsServerPathFlags = map[string]bool{
	"cert-dir": true, "tls-cert-file": true, "tls-private-key-file": true, "client-ca-file": true,
	"requestheader-client-ca-file": true, "kubelet-certificate-authority": true, "kubelet-client-certificate": true,
	"kubelet-client-key": true, "kubeconfig": true, "authentication-kubeconfig": true, "authorization-kubeconfig": true,
	"audit-log-path": true, "audit-policy-file": true,
}

// metricsServerBoolFlags are its boolean flags: every other flag not
// written --flag=value takes the next argument as its value.
var metricsServerBoolFlags = map[string]bool{
	"kubelet-insecure-tls": true, "kubelet-use-node-status-port": true, "deprecated-kubelet-completely-insecure": true,
	"version": true, "authentication-skip-lookup": true, "authentication-tolerate-lookup-failure": true,
	"permit-port-sharing": true, "permit-address-sharing": true, "logtostderr": true, "alsologtostderr": true,
	"disable-http2-serving": true,
}

// metricsServerArgs is the container's command line as the program on the
// host runs it: the image's entrypoint dropped when the command names it,
// paths moved under the container's directory, the bind address the pod's,
// and the kubeconfigs the in-cluster ones unless the pod gives its own.
func metricsServerArgs(cmdline []string, dir string, addr netip.Addr, kubeconfig string) []string {
	if len(cmdline) > 0 && !strings.HasPrefix(cmdline[0], "-") {
		cmdline = cmdline[1:] // the image's /metrics-server
	}
	var out []string
	given := map[string]bool{}
	for i := 0; i < len(cmdline); i++ {
		a := cmdline[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
			continue
		}
		if !hasValue && !metricsServerBoolFlags[name] && i+1 < len(cmdline) {
			value, hasValue = cmdline[i+1], true
			i++
		}
		given[name] = true
		switch {
		case name == "bind-address":
			continue // the pod's, below
		case metricsServerPathFlags[name] && hasValue && filepath.IsAbs(value):
			value = filepath.Join(dir, "fs", value)
			if name == "cert-dir" {
				_ = os.MkdirAll(value, 0o700)
			}
		}
		if hasValue {
			out = append(out, "--"+name+"="+value)
		} else {
			out = append(out, "--"+name)
		}
	}
	out = append(out, "--bind-address="+addr.String())
	for _, f := range []string{"kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"} {
		if !given[f] {
			out = append(out, "--"+f+"="+kubeconfig)
		}
	}
	return out
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
	mint := tokenSource(func() (*oauth2.Token, error) {
		tr, err := boundToken(context.Background(), admin, pod)
		if err != nil {
			return nil, err
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
