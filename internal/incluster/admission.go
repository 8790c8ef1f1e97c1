package incluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winkube/winkube/internal/webhooks/workload"
)

type admissionOptions struct {
	kubeconfig       string
	port             int
	certDir          string
	serviceName      string
	serviceNamespace string
	install          bool
	failurePolicy    string
	windowsTaint     bool
	insecure         []string
	metricsAddr      string
	caSecret         string
	enableHTTP2      bool
}

func NewAdmissionCommand() *cobra.Command {
	o := &admissionOptions{}
	cmd := &cobra.Command{
		Use:   "admission",
		Short: "Serve winkube's workload admission webhooks for a workload cluster",
		Long: `Serve the webhooks that place workloads by their images and refuse what
Windows cannot do, in a workload cluster (run it as a Deployment there,
behind a Service):

  - pods and pod templates (Deployments, DaemonSets, StatefulSets,
    ReplicaSets, Jobs, CronJobs) whose images are all Windows get
    spec.os.name windows, nodeSelector kubernetes.io/os=windows and an
    affinity to the Windows builds that run every image (a 2025 host also
    runs 2022 images); all-Linux images get kubernetes.io/os=linux; a user's
    selector is never overwritten, and one that contradicts the images is
    refused;
  - Windows pods using hostNetwork without HostProcess, privileged
    containers, Linux-only security settings, hostPID/hostIPC, memory
    emptyDirs, mount propagation or raw block devices are refused; Secrets
    mounted into Windows pods, and Services with more than 64 Windows
    backends on Windows Server 2019 before 17763.2746, are warned about.

Namespaces labelled winkube.dev/admission=disabled, kube-system and the
server's own namespace are left alone, and the webhooks fail open, so the
cluster never depends on this server to start its own pods. Pods waiting
for a Windows build no node has get an event saying which build their
images need and how to get one.

Certificates: with --ca-secret (the default), every replica reads one CA
from that Secret in --service-namespace (the first replica creates it,
any replica rotates it before it expires) and signs its own serving
certificate with it in --cert-dir, so any replica behind the Service is
trusted; --ca-secret "" keeps a CA of this process's own in --cert-dir,
for a single replica. With --install the webhook configurations are
created, and their caBundle kept to the CA (a ClusterResourceSet that
delivers them without one is completed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return badInput(cmd, err)
			}
			return runAdmission(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster (default: in-cluster or $KUBECONFIG)")
	f.IntVar(&o.port, "port", 9443, "HTTPS port of the webhook server")
	f.StringVar(&o.certDir, "cert-dir", filepath.Join(os.TempDir(), "winkube-admission-certs"), "folder of the CA and serving certificate")
	f.StringVar(&o.serviceName, "service-name", "winkube-admission", "Service in front of this server")
	f.StringVar(&o.serviceNamespace, "service-namespace", "winkube-system", "namespace of that Service")
	f.BoolVar(&o.install, "install", true, "create or update the webhook configurations")
	f.StringVar(&o.failurePolicy, "registry-failure-policy", "open", "when an image's registry cannot be read: open (admit as is, with a warning) or closed (refuse)")
	f.BoolVar(&o.windowsTaint, "windows-taint", false, "Windows nodes carry os=windows:NoSchedule: add its toleration to Windows pods")
	f.StringSliceVar(&o.insecure, "insecure-registry", nil, "registries reached over plain HTTP (host:port)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "where to serve Prometheus metrics, as plain HTTP without authentication, such as 127.0.0.1:8080 (0 to disable)")
	f.BoolVar(&o.enableHTTP2, "enable-http2", false, "let the webhook and metrics servers speak HTTP/2; off by default for HTTP/2 Rapid Reset (CVE-2023-44487)")
	f.StringVar(&o.caSecret, "ca-secret", "winkube-admission-ca", "Secret in --service-namespace holding the CA every replica shares (\"\" for a CA of this process's own)")
	return cmd
}

func (o *admissionOptions) validate() error {
	if o.failurePolicy != "open" && o.failurePolicy != "closed" {
		return fmt.Errorf("--registry-failure-policy %q: use open or closed", o.failurePolicy)
	}
	return nil
}

func runAdmission(ctx context.Context, o *admissionOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctrl.SetLogger(zap.New())
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("reaching the workload cluster: %w", err)
	}
	r := workload.NewResolver()
	r.Insecure = o.insecure
	return workload.Serve(ctx, workload.ServerOptions{
		Config: cfg, Port: o.port, CertDir: o.certDir,
		DNSNames:     []string{o.serviceName + "." + o.serviceNamespace + ".svc", o.serviceName + "." + o.serviceNamespace + ".svc.cluster.local"},
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: o.serviceName, Namespace: o.serviceNamespace}},
		CASecret:     client.ObjectKey{Namespace: o.serviceNamespace, Name: o.caSecret},
		Install:      o.install, Resolver: r, FailClosed: o.failurePolicy == "closed", WindowsTaint: o.windowsTaint,
		MetricsAddr: o.metricsAddr, EnableHTTP2: o.enableHTTP2, Logger: ctrl.Log.WithName("admission"),
	})
}
