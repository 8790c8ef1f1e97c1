package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/standalone"
)

// emulatorOptions is `winkube emulator`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d): cobra fills it from
// the flags, Validate refuses what no run could use, Run serves the
// emulator that emulator/standalone starts until ctx ends.
type emulatorOptions struct {
	listen           string
	entraListen      string
	directory        string
	tenant           string
	tenantSet        bool
	operators        []string
	state            string
	caFile           string
	operationDelay   time.Duration
	bootDelayLinux   time.Duration
	bootDelayWindows time.Duration
	readsPerHour     int
	writesPerHour    int
	saveEvery        time.Duration
}

func newEmulatorCommand() *cobra.Command {
	o := &emulatorOptions{}
	cmd := &cobra.Command{
		Use:   "emulator",
		Short: "Run the Azure Resource Manager emulator on its own",
		Long: `Run winkube's Azure Resource Manager emulator: resource groups, networking,
VMs, disks, scale sets, the VM image catalog and resource SKUs, served over
HTTPS with a CA of its own. Point the Azure SDK (or winkube manager) at it to
try cluster definitions without an Azure subscription.

Standalone, VMs provision but nothing boots them: 'winkube up' adds the
machine runtime that turns them into Kubernetes nodes.

Beside ARM it serves an Entra ID (--entra-listen): OIDC discovery, the
token endpoint for client secrets, certificate assertions and federated
(workload identity) tokens, and App Service's managed-identity endpoint.
ARM accepts only its tokens and enforces its role assignments (Owner,
Contributor, Reader, Network Contributor, User Access Administrator) as
Azure does; each VM's Instance Metadata Service issues tokens for the
managed identities attached to it. --directory loads principals, role
assignments and trusted issuers from a JSON file; without it, a service
principal with Contributor and User Access Administrator on every
subscription is made and printed (the flavors' machines get system-assigned
identities, whose roles the manager assigns).

The control API (PUT /emulator/faults, /emulator/counters) acts on every
subscription: only the service principal made at the first start and the
principals named by --operator may use it. Tokens of tenants other than
--tenant are refused (401 InvalidAuthenticationTokenTenant), as ARM refuses
them for a subscription of another tenant.

With --state the resources survive a restart: they are loaded at start and
saved on exit (and every --save-every), the directory beside them.

GET /metadata/endpoints?api-version=2022-09-01 (also 1.0, 2015-01-01,
2019-05-01) answers without a token, naming this ARM, its Entra ID and the
token audience: 'az cloud register -n WinkubeEmulator
--endpoint-resource-manager <ARM URL>' reads it. Api-versions: those Azure
publishes up to today's SDKs are served; a date later than the newest the
emulator knows is served as that newest one, and the answer's
X-Winkube-Served-Api-Version header says which; malformed, unknown and
too-old versions are refused as ARM refuses them.

Clients tried (2026-11-28): the Azure SDK for Go (go.mod's modules and
armresources/v3 v3.0.1, armcompute/v8 v8.4.0, armnetwork/v9 v9.0.0), for
JavaScript (@azure/arm-resources 8.0.0, arm-compute 25.1.1, arm-network
39.0.0, identity 4.14.1), for Python (Debian's azure-mgmt-compute 29.0.0,
azure-identity 1.13.0b2), and the Azure CLI 2.45.0 ('cloud register'
works; its 'login' needs login.microsoftonline.com for instance
discovery). An operation the emulator lacks answers 404 NotFound, 405
MethodNotAllowed or 400 InvalidResourceType/NoRegisteredProviderFound:
report it to winkube's issue tracker with the method, path, api-version,
the client and its version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.tenantSet = cmd.Flags().Changed("tenant")
			if err := o.Validate(); err != nil {
				return withHelp(cmd, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return withHelp(cmd, o.Run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8443", "address to serve ARM on (port 0 picks a free one)")
	f.StringVar(&o.entraListen, "entra-listen", "127.0.0.1:8444", "address to serve Entra ID on (port 0 picks a free one)")
	f.StringVar(&o.directory, "directory", "", "JSON file of Entra ID principals, role assignments and trusted issuers")
	f.StringVar(&o.tenant, "tenant", "72f988bf-0000-4000-8000-00000000e1d0", "tenant the subscriptions belong to (ARM refuses other tenants' tokens), and of the service principal made when there is no --directory")
	f.StringSliceVar(&o.operators, "operator", nil, "client IDs of the principals that may use the control API (/emulator/faults, /emulator/counters); the service principal made when there is no --directory")
	f.StringVar(&o.state, "state", "", "file to load resources from and save them to")
	f.StringVar(&o.caFile, "ca-file", "", "where to write the CA certificate clients must trust (beside --state, or in a temporary folder)")
	f.DurationVar(&o.operationDelay, "operation-delay", 100*time.Millisecond, "how long each long-running operation takes")
	f.DurationVar(&o.bootDelayLinux, "boot-delay-linux", time.Second, "extra provisioning time of a Linux VM")
	f.DurationVar(&o.bootDelayWindows, "boot-delay-windows", 3*time.Second, "extra provisioning time of a Windows VM (Windows boots slower, as on Azure)")
	f.IntVar(&o.readsPerHour, "reads-per-hour", 0, "per-subscription read budget before 429s (0: unlimited)")
	f.IntVar(&o.writesPerHour, "writes-per-hour", 0, "per-subscription write budget before 429s (0: unlimited)")
	f.DurationVar(&o.saveEvery, "save-every", 30*time.Second, "how often to save --state while running")
	return cmd
}

// Validate refuses flags no run could use, naming the flag to change.
func (o *emulatorOptions) Validate() error {
	if o.readsPerHour < 0 || o.writesPerHour < 0 {
		return badInputf(nil, "--reads-per-hour %d, --writes-per-hour %d: the rates cannot be negative (0 is unlimited)", o.readsPerHour, o.writesPerHour)
	}
	for _, a := range []struct{ flag, addr string }{{"--listen", o.listen}, {"--entra-listen", o.entraListen}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return badInputf(nil, "%s %q: want HOST:PORT, such as 127.0.0.1:8443 (port 0 picks a free one)", a.flag, a.addr)
		}
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"--operation-delay", o.operationDelay}, {"--boot-delay-linux", o.bootDelayLinux}, {"--boot-delay-windows", o.bootDelayWindows}} {
		if d.d < 0 {
			return badInputf(nil, "%s %s: want a duration of zero or more, such as 1s", d.flag, d.d)
		}
	}
	// The state is saved on a ticker, which a zero or negative period
	// would make panic.
	if o.saveEvery <= 0 {
		return badInputf(nil, "--save-every %s: want a positive duration, such as 30s", o.saveEvery)
	}
	return nil
}

// Run serves the emulator, printing how to reach it, until ctx ends; then
// it saves --state.
func (o *emulatorOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	e, err := standalone.Start(standalone.Options{
		Listen: o.listen, EntraListen: o.entraListen, DirectoryFile: o.directory,
		Tenant: o.tenant, TenantSet: o.tenantSet, Operators: o.operators, State: o.state, CAFile: o.caFile,
		OperationDelay: o.operationDelay, BootDelayLinux: o.bootDelayLinux, BootDelayWindows: o.bootDelayWindows,
		Throttle: arm.Throttle{ReadsPerHour: o.readsPerHour, WritesPerHour: o.writesPerHour},
	})
	var unknown *standalone.UnknownOperatorError
	switch {
	case errors.As(err, &unknown):
		return badInputf(nil, "--operator %s: no principal with that client ID in the directory", unknown.ClientID)
	case errors.Is(err, standalone.ErrDirectoryFile):
		return fmt.Errorf("--directory: %w", err)
	case err != nil:
		return err
	}
	defer e.Close()
	if e.Loaded {
		fmt.Fprintf(out, "loaded resources from %s\n", o.state)
	}
	o.printEndpoints(out, e)
	tick := time.NewTicker(o.saveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := e.Save(); err != nil {
				return fmt.Errorf("saving --state: %w", err)
			}
			if o.state != "" {
				fmt.Fprintf(out, "saved resources to %s\n", o.state)
			}
			return nil
		case <-tick.C:
			if err := e.Save(); err != nil {
				fmt.Fprintf(errOut, "saving --state: %v\n", err)
			}
		}
	}
}

func (o *emulatorOptions) printEndpoints(out io.Writer, e *standalone.Emulator) {
	armURL, login := e.ARM.URL(), e.Login.URL()
	fmt.Fprintf(out, "ARM emulator serving on %s, its Entra ID on %s\n\n", armURL, login)
	fmt.Fprintf(out, "Point the Azure SDK at it:\n")
	fmt.Fprintf(out, "  AZURE_RESOURCE_MANAGER_ENDPOINT=%s\n", armURL)
	fmt.Fprintf(out, "  AZURE_AUTHORITY_HOST=%s\n", login)
	fmt.Fprintf(out, "  AZURE_CA_FILE=%s\n", e.CAFile)
	if e.Bootstrap != nil {
		fmt.Fprintf(out, "  AZURE_TENANT_ID=%s\n", e.Bootstrap.TenantID)
		fmt.Fprintf(out, "  AZURE_CLIENT_ID=%s\n", e.Bootstrap.ClientID)
		fmt.Fprintf(out, "  AZURE_CLIENT_SECRET=%s\n", e.BootstrapSecret)
	}
	fmt.Fprintf(out, "  IDENTITY_ENDPOINT=%s IDENTITY_HEADER=%s (managed identities)\n\n", e.Login.ManagedIdentityEndpoint(), e.Dir.IdentityHeader())
	fmt.Fprintf(out, "  (cloud.Configuration with authority host %s and ResourceManager endpoint and audience %s,\n   a transport that trusts %s, and an azidentity credential)\n", login, armURL, e.CAFile)
	fmt.Fprintf(out, "Counters: GET %s/emulator/counters   Faults: PUT %s/emulator/faults\n", armURL, armURL)
}
