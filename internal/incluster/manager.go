package incluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/credentials"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

type managerOptions struct {
	kubeconfig    string
	armEndpoint   string
	armCAFile     string
	entraEndpoint string
	concurrency   int
	requeue       time.Duration
	// bootstrapTimeout and poolBootstrapTimeout: see the flags.
	bootstrapTimeout, poolBootstrapTimeout time.Duration
	metricsAddr                            string
	healthAddr                             string
	webhookPort                            int
	webhookCertDir                         string
	noWebhooks                             bool
	enableHTTP2                            bool

	// customClouds and managerCredentialNamespaces: see the flags.
	customClouds                []string
	managerCredentialNamespaces []string
	// ambientIdentityNamespaces: see the flag.
	ambientIdentityNamespaces []string
	// roleAssignmentScopes: see the flag.
	roleAssignmentScopes []string
	// runCommandConcurrency: see the flag.
	runCommandConcurrency int

	leaderElect         bool
	leaderElectionNS    string
	leaderElectionID    string
	watchNamespace      string
	verbosity           int
	logFormat           string
	gracefulShutdown    time.Duration
	leaseDuration       time.Duration
	renewDeadline       time.Duration
	leaderElectionRetry time.Duration
}

// LeaderElectionID is the name of the Lease the managers of one management
// cluster compete for.
const LeaderElectionID = "winkube-manager.infrastructure.winkube.dev"

func NewManagerCommand() *cobra.Command {
	o := &managerOptions{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run winkube's Cluster API infrastructure controllers and webhooks",
		Long: `Run the AzureCluster and AzureMachine controllers and winkube's admission
webhooks against a management cluster that already runs Cluster API.

Each AzureCluster with spec.identityRef acts as its AzureClusterIdentity
(a service principal with a secret or a certificate, a workload identity or
a user-assigned managed identity), restricted to the namespaces the identity
allows. A cluster without an identityRef is refused (Ready=False,
ManagerCredentialNotAllowed), as in CAPZ since v1.11, unless its namespace
is listed in --manager-credential-namespaces: those act as the manager's own
credential, the Azure SDK's default chain (AZURE_CLIENT_ID/AZURE_TENANT_ID
with AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH, workload
identity, managed identity, az CLI). A machine whose AzureCluster is gone
waits (DeletionBlocked) instead of deleting with another credential.

A WorkloadIdentity or UserAssignedMSI identity has no secret: the manager
proves it with its own service-account token or its host's managed
identity. So those are honoured only in --ambient-identity-namespaces (by
default the manager's own namespace), where only the operator writes; one
written elsewhere, by anyone who may copy a client ID into their own
namespace, is refused (Ready=False, AmbientIdentityNotAllowed).

By default they talk to Azure public cloud. With --arm-endpoint and
--entra-endpoint they talk to another ARM endpoint and the Entra ID that
issues its tokens, such as the ones 'winkube emulator' prints, trusting
--arm-ca-file. An AzureCluster may pick Azure's named clouds
(spec.azureEnvironment) or a Custom cloud whose two endpoints are exactly
the manager's own or those of a --custom-cloud: an identity's secret or
token is never sent to a host the operator did not configure
(Ready=False, CustomCloudNotConfigured).

Prometheus metrics (including winkube_arm_requests_total by kind, method and
status code) are served on --metrics-bind-address, /healthz and /readyz (ready
once the webhook server listens) on --health-probe-bind-address.

With --leader-elect several replicas can run: only the holder of the Lease
reconciles; the others serve webhooks and wait to take over. On SIGTERM the
manager lets reconciles finish (--graceful-shutdown-timeout) and hands the
Lease over at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runManager(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: in-cluster or $KUBECONFIG)")
	f.StringVar(&o.armEndpoint, "arm-endpoint", "", "ARM endpoint such as https://127.0.0.1:8443 (default: Azure public cloud)")
	f.StringVar(&o.armCAFile, "arm-ca-file", "", "CA certificate to trust for --arm-endpoint and --entra-endpoint")
	f.StringVar(&o.entraEndpoint, "entra-endpoint", "", "Entra ID authority host issuing tokens for --arm-endpoint, such as https://127.0.0.1:8444")
	f.StringArrayVar(&o.customClouds, "custom-cloud", nil, "a cloud besides Azure's named ones that AzureClusters may pick with spec.azureEnvironment Custom and exactly these endpoints: name=NAME,arm=https://...,entra=https://...[,ca-file=PATH] (repeatable)")
	f.StringSliceVar(&o.managerCredentialNamespaces, "manager-credential-namespaces", splitList(os.Getenv(ManagerCredentialNamespacesEnv)),
		"namespaces whose AzureClusters may act without an identityRef, as the manager's own credential; * for all (default: none, or $"+ManagerCredentialNamespacesEnv+", which the credentials Secret can carry)")
	f.StringSliceVar(&o.ambientIdentityNamespaces, "ambient-identity-namespaces", defaultAmbientIdentityNamespaces(),
		"namespaces whose WorkloadIdentity and UserAssignedMSI AzureClusterIdentities the manager honours, their token being the manager's own (its service-account token, its host's managed identity); * for all, which lets anyone who may write an AzureClusterIdentity act as any principal that trusts the manager (default: $"+AmbientIdentityNamespacesEnv+", else the manager's own namespace)")
	f.StringSliceVar(&o.roleAssignmentScopes, "role-assignment-scopes", nil,
		"ARM scopes, beyond each cluster's own resource group, at which a machine's systemAssignedIdentityRole may grant its VM a role, such as /subscriptions/SUB (default: the cluster's resource group only)")
	f.IntVar(&o.concurrency, "concurrency", 10, "objects of each kind reconciled at once")
	f.DurationVar(&o.requeue, "requeue", 5*time.Second, "how soon to look again at an Azure operation under way")
	f.DurationVar(&o.bootstrapTimeout, "bootstrap-timeout", controllers.DefaultBootstrapTimeout, "how long a provisioned VM may take to become a node before its bootstrap is reported failed (condition BootstrapSucceeded) with its log, read through Azure's Run Command or boot diagnostics")
	f.DurationVar(&o.poolBootstrapTimeout, "pool-bootstrap-timeout", controllers.DefaultPoolBootstrapTimeout, "the same for a scale-set (MachinePool) instance")
	f.IntVar(&o.runCommandConcurrency, "run-command-concurrency", controllers.DefaultRunCommandConcurrency, "how many Run Commands (failed bootstraps' logs read through Azure) the manager has under way at once; the others wait their turn")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "where to serve Prometheus metrics, as plain HTTP without authentication: keep it on a loopback address unless a NetworkPolicy restricts who reaches it (0 to disable)")
	f.BoolVar(&o.enableHTTP2, "enable-http2", false, "let the webhook and metrics servers speak HTTP/2; off by default for HTTP/2 Rapid Reset (CVE-2023-44487), as kubebuilder's scaffold does")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "where to serve /healthz and /readyz")
	f.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the webhook server")
	f.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "folder with tls.crt and tls.key for the webhook server")
	f.BoolVar(&o.noWebhooks, "no-webhooks", false, "do not serve the webhooks (when they run elsewhere)")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "run the controllers only while holding the Lease, so that several replicas can run")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "namespace of the Lease (default: the Pod's namespace in a cluster)")
	f.StringVar(&o.leaderElectionID, "leader-election-id", LeaderElectionID, "name of the Lease")
	f.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long followers wait before taking over a Lease that is not renewed")
	f.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops leading")
	f.DurationVar(&o.leaderElectionRetry, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	f.StringVar(&o.watchNamespace, "watch-namespace", "", "reconcile only objects of this namespace (default: all namespaces)")
	f.IntVarP(&o.verbosity, "v", "v", 0, "log verbosity: 0 for the essentials, higher for more detail")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "how long reconciles in progress may take to finish on SIGTERM")
	return cmd
}

// cloudFromFlags builds the Azure endpoint configuration and the manager's
// own credential, which serves only clusters without an identityRef.
func cloudFromFlags(endpointURL, caFile, entraURL string) (*cloud.Cloud, error) {
	cfg := endpoint.Config{ResourceManagerEndpoint: endpointURL, AuthorityHost: entraURL}
	if endpointURL != "" && entraURL == "" {
		return nil, errors.New("--arm-endpoint needs --entra-endpoint, the Entra ID that issues its tokens (winkube emulator prints both)")
	}
	if endpointURL == "" && (entraURL != "" || caFile != "") {
		return nil, errors.New("--entra-endpoint and --arm-ca-file go with --arm-endpoint")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--arm-ca-file: %w", err)
		}
		cfg.CACertPEM = pem
	}
	shared, err := cfg.Shared()
	if err != nil {
		return nil, fmt.Errorf("--arm-ca-file: %w", err)
	}
	opts := &azidentity.DefaultAzureCredentialOptions{}
	if endpointURL != "" {
		opts.Cloud.ActiveDirectoryAuthorityHost = entraURL
		opts.Transport = shared.Transport
		opts.DisableInstanceDiscovery = credentials.CustomAuthority(entraURL)
	}
	// Without a credential of its own the manager still serves clusters
	// that name an identity.
	if cred, err := azidentity.NewDefaultAzureCredential(opts); err == nil {
		shared.Credential = cred
	}
	return cloud.New(shared), nil
}

// ManagerCredentialNamespacesEnv is --manager-credential-namespaces's
// default: the Deployment reads its environment from the credentials
// Secret, so the operator enables the manager's credential for namespaces
// in the same Secret that holds it.
const ManagerCredentialNamespacesEnv = "WINKUBE_MANAGER_CREDENTIAL_NAMESPACES"

// AmbientIdentityNamespacesEnv is --ambient-identity-namespaces's default
// when set, as the credentials Secret can carry it.
const AmbientIdentityNamespacesEnv = "WINKUBE_AMBIENT_IDENTITY_NAMESPACES"

// podNamespaceFile is where the kubelet mounts the Pod's namespace with
// its service-account token.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultAmbientIdentityNamespaces is $WINKUBE_AMBIENT_IDENTITY_NAMESPACES,
// else the manager Pod's namespace, which only the operator writes to;
// outside a Pod, none.
func defaultAmbientIdentityNamespaces() []string {
	if v := splitList(os.Getenv(AmbientIdentityNamespacesEnv)); len(v) > 0 {
		return v
	}
	if b, err := os.ReadFile(podNamespaceFile); err == nil {
		return splitList(string(b))
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// customCloudsFromFlags reads --custom-cloud values and their CA files.
func customCloudsFromFlags(values []string) ([]cloud.CustomCloud, error) {
	var out []cloud.CustomCloud
	seen := map[string]bool{}
	for _, v := range values {
		c, caFile, err := cloud.ParseCustomCloud(v)
		if err != nil {
			return nil, fmt.Errorf("--custom-cloud %w", err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("--custom-cloud: two clouds named %q", c.Name)
		}
		seen[c.Name] = true
		if caFile != "" {
			if c.CACertPEM, err = os.ReadFile(caFile); err != nil {
				return nil, fmt.Errorf("--custom-cloud %s: %w", c.Name, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func runManager(cmd *cobra.Command, o *managerOptions) error {
	if o.concurrency < 1 {
		return errors.New("--concurrency must be at least 1")
	}
	for _, scope := range o.roleAssignmentScopes {
		if err := checkScope(scope); err != nil {
			return badInput(cmd, err)
		}
	}
	logger, err := NewLogger(cmd.ErrOrStderr(), o.logFormat, o.verbosity)
	if err != nil {
		return err
	}
	c, err := cloudFromFlags(o.armEndpoint, o.armCAFile, o.entraEndpoint)
	if err != nil {
		return err
	}
	customClouds, err := customCloudsFromFlags(o.customClouds)
	if err != nil {
		return err
	}
	ctrl.SetLogger(logger)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	restCfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("reaching the management cluster: %w", err)
	}
	_ = metrics.Registry.Register(endpoint.Requests)
	mgr, err := ctrl.NewManager(restCfg, o.managerOptions())
	if err != nil {
		return err
	}
	if err := controllers.Setup(mgr, controllers.Options{Cloud: c, FederatedTokenFile: os.Getenv("AZURE_FEDERATED_TOKEN_FILE"), Concurrency: o.concurrency, Requeue: o.requeue,
		BootstrapTimeout: o.bootstrapTimeout, PoolBootstrapTimeout: o.poolBootstrapTimeout, RunCommandConcurrency: o.runCommandConcurrency,
		CustomClouds: customClouds, ManagerCredentialNamespaces: o.managerCredentialNamespaces, AmbientIdentityNamespaces: o.ambientIdentityNamespaces, RoleAssignmentScopes: o.roleAssignmentScopes}); err != nil {
		return err
	}
	if !o.noWebhooks {
		if err := webhooks.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready only once the webhook server listens: the Service sends
	// admission requests to ready Pods only, and the API server refuses
	// winkube's objects while no webhook answers.
	ready := healthz.Ping
	if !o.noWebhooks {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("webhooks", ready); err != nil {
		return err
	}
	return mgr.Start(cmd.Context())
}

// managerOptions turns the flags into controller-runtime's options.
func (o *managerOptions) managerOptions() ctrl.Options {
	opts := ctrl.Options{
		Scheme:                  scheme.New(),
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr, TLSOpts: workload.TLSOptions(o.enableHTTP2)},
		HealthProbeBindAddress:  o.healthAddr,
		WebhookServer:           webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.webhookCertDir, TLSOpts: workload.TLSOptions(o.enableHTTP2)}),
		GracefulShutdownTimeout: &o.gracefulShutdown,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.leaderElectionRetry,
		// The manager exits right after it stops leading, so it can hand
		// the Lease over at once instead of making the next leader wait a
		// whole lease duration.
		LeaderElectionReleaseOnCancel: true,
	}
	if o.watchNamespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{o.watchNamespace: {}}}
	}
	opts.Cache = controllers.SecretCache(opts.Cache)
	opts.Client = controllers.ReadSecretsLive(opts.Client)
	return opts
}

// NewLogger builds the manager's logger: logr verbosity v maps to zap level
// -v, and json suits log collectors where text suits a terminal.
func NewLogger(w io.Writer, format string, v int) (logr.Logger, error) {
	if v < 0 {
		return logr.Logger{}, errors.New("-v must be 0 or more")
	}
	opts := []zap.Opts{zap.WriteTo(w), zap.Level(zapcore.Level(-v)), zap.StacktraceLevel(zapcore.PanicLevel)}
	switch format {
	case "text":
		opts = append(opts, zap.ConsoleEncoder())
	case "json":
		opts = append(opts, zap.JSONEncoder())
	default:
		return logr.Logger{}, fmt.Errorf("--log-format %q: use text or json", format)
	}
	return zap.New(opts...), nil
}

// checkScope refuses a --role-assignment-scopes value that is not an ARM
// scope inside one subscription: the scopes widen what a tenant's machine
// may be granted, so a typo must not pass as "everything".
func checkScope(scope string) error {
	parts := strings.Split(strings.TrimRight(scope, "/"), "/")
	if len(parts) < 3 || parts[0] != "" || !strings.EqualFold(parts[1], "subscriptions") || parts[2] == "" || slices.Contains(parts[1:], "") {
		return fmt.Errorf("--role-assignment-scopes %q: give ARM scopes such as /subscriptions/SUB or /subscriptions/SUB/resourceGroups/RG", scope)
	}
	return nil
}
