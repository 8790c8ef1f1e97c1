package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
)

type managerOptions struct {
	kubeconfig     string
	armEndpoint    string
	armCAFile      string
	armToken       string
	concurrency    int
	requeue        time.Duration
	metricsAddr    string
	healthAddr     string
	webhookPort    int
	webhookCertDir string
	noWebhooks     bool
}

func newManagerCommand() *cobra.Command {
	o := &managerOptions{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run winkube's Cluster API infrastructure controllers and webhooks",
		Long: `Run the AzureCluster and AzureMachine controllers and winkube's admission
webhooks against a management cluster that already runs Cluster API.

By default they talk to Azure public cloud with the Azure SDK's default
credential chain (environment, workload identity, managed identity, az CLI).
With --arm-endpoint they talk to another ARM endpoint, such as the one
'winkube emulator' prints, using --arm-ca-file and --arm-token.

Prometheus metrics (including winkube_arm_requests_total by kind, method and
status code) are served on --metrics-bind-address.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runManager(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: in-cluster or $KUBECONFIG)")
	f.StringVar(&o.armEndpoint, "arm-endpoint", "", "ARM endpoint such as https://127.0.0.1:8443 (default: Azure public cloud)")
	f.StringVar(&o.armCAFile, "arm-ca-file", "", "CA certificate to trust for --arm-endpoint")
	f.StringVar(&o.armToken, "arm-token", os.Getenv("AZURE_TOKEN"), "bearer token for --arm-endpoint (default $AZURE_TOKEN)")
	f.IntVar(&o.concurrency, "concurrency", 10, "objects of each kind reconciled at once")
	f.DurationVar(&o.requeue, "requeue", 5*time.Second, "how soon to look again at an Azure operation under way")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "where to serve Prometheus metrics (0 to disable)")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "where to serve /healthz and /readyz")
	f.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the webhook server")
	f.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "folder with tls.crt and tls.key for the webhook server")
	f.BoolVar(&o.noWebhooks, "no-webhooks", false, "do not serve the webhooks (when they run elsewhere)")
	return cmd
}

// cloudFromFlags builds the Azure endpoint configuration from the flags.
func cloudFromFlags(endpointURL, caFile, token string) (*cloud.Cloud, error) {
	cfg := endpoint.Config{ResourceManagerEndpoint: endpointURL}
	if endpointURL == "" {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, fmt.Errorf("no Azure credential: %w (or use --arm-endpoint for the emulator)", err)
		}
		cfg.Credential = cred
		return cloud.New(cfg), nil
	}
	if caFile == "" || token == "" {
		return nil, errors.New("--arm-endpoint needs --arm-ca-file and --arm-token (winkube emulator prints both)")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--arm-ca-file: %w", err)
	}
	cfg.CACertPEM = pem
	cfg.Credential = endpoint.StaticToken(token)
	if _, err := cfg.ClientOptions(); err != nil {
		return nil, fmt.Errorf("--arm-ca-file: %w", err)
	}
	return cloud.New(cfg), nil
}

func runManager(cmd *cobra.Command, o *managerOptions) error {
	if o.concurrency < 1 {
		return errors.New("--concurrency must be at least 1")
	}
	c, err := cloudFromFlags(o.armEndpoint, o.armCAFile, o.armToken)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New())
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	restCfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("reaching the management cluster: %w", err)
	}
	_ = metrics.Registry.Register(endpoint.Requests)
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.healthAddr,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.webhookCertDir}),
	})
	if err != nil {
		return err
	}
	if err := controllers.Setup(mgr, controllers.Options{Cloud: c, Concurrency: o.concurrency, Requeue: o.requeue}); err != nil {
		return err
	}
	if !o.noWebhooks {
		if err := webhooks.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	_ = mgr.AddHealthzCheck("ping", healthz.Ping)
	_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	return mgr.Start(cmd.Context())
}
