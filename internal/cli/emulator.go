package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
)

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

type emulatorOptions struct {
	listen           string
	entraListen      string
	directory        string
	tenant           string
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runEmulator(ctx, cmd, o)
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

func runEmulator(ctx context.Context, cmd *cobra.Command, o *emulatorOptions) error {
	if o.readsPerHour < 0 || o.writesPerHour < 0 {
		return badInputf(cmd, "--reads-per-hour %d, --writes-per-hour %d: the rates cannot be negative", o.readsPerHour, o.writesPerHour)
	}
	dir, err := entra.New(entra.Options{})
	if err != nil {
		return err
	}
	dirState := ""
	if o.state != "" {
		dirState = filepath.Join(filepath.Dir(o.state), "entra.json")
	}
	var bootstrap *entra.Principal
	var bootstrapSecret string
	switch {
	case o.directory != "":
		if err := dir.LoadFile(o.directory); err != nil {
			return fmt.Errorf("--directory: %w", err)
		}
	case dirState != "" && fileExists(dirState):
		if err := dir.LoadFile(dirState); err != nil {
			return fmt.Errorf("loading the directory beside --state: %w", err)
		}
		// The principal made at the first start is printed again.
		if snap, err := dir.Snapshot(); err == nil {
			for _, p := range snap.Principals {
				if p.DisplayName == "winkube-emulator" && len(p.Secrets) > 0 {
					bootstrap, bootstrapSecret = &p, p.Secrets[0]
				}
			}
		}
	default:
		p, secret, err := dir.CreateServicePrincipal(o.tenant, "winkube-emulator")
		if err != nil {
			return err
		}
		if err := dir.AssignRole(p.ObjectID, "Contributor", "/"); err != nil {
			return err
		}
		// A manager acting as it gives the flavors' machines'
		// system-assigned identities their roles, as an Owner would.
		if err := dir.AssignRole(p.ObjectID, "User Access Administrator", "/"); err != nil {
			return err
		}
		bootstrap, bootstrapSecret = &p, secret
	}
	// The control API acts on every subscription: only the operators may
	// use it, not every principal with a role somewhere.
	var operators []string
	if bootstrap != nil {
		operators = append(operators, bootstrap.ObjectID)
	}
	for _, id := range o.operators {
		p, ok := dir.Principal(id)
		if !ok {
			return badInputf(cmd, "--operator %s: no principal with that client ID in the directory", id)
		}
		operators = append(operators, p.ObjectID)
	}
	// The subscriptions are in --tenant: tokens of other tenants are
	// refused as ARM refuses them. A --directory of several tenants keeps
	// every tenant's tokens unless --tenant is given.
	tenant := o.tenant
	switch {
	case cmd.Flags().Changed("tenant"):
	case bootstrap != nil:
		tenant = bootstrap.TenantID
	case o.directory != "":
		tenant = ""
	}
	srv, err := arm.New(arm.Options{
		Directory: dir, TenantID: tenant, Operators: operators, OperationDelay: o.operationDelay,
		BootDelayLinux: o.bootDelayLinux, BootDelayWindows: o.bootDelayWindows,
		Throttle: arm.Throttle{ReadsPerHour: o.readsPerHour, WritesPerHour: o.writesPerHour},
	})
	if err != nil {
		return err
	}
	if o.state != "" {
		switch err := srv.Load(o.state); {
		case err == nil:
			fmt.Fprintf(cmd.OutOrStdout(), "loaded resources from %s\n", o.state)
		case errors.Is(err, fs.ErrNotExist):
		default:
			return fmt.Errorf("loading --state: %w", err)
		}
	}
	if err := srv.Start(o.listen); err != nil {
		return err
	}
	defer srv.Close()
	entraHost, _, err := net.SplitHostPort(o.entraListen)
	if err != nil {
		return fmt.Errorf("--entra-listen: %w", err)
	}
	cert, err := srv.ServerCertificate(entraHost)
	if err != nil {
		return err
	}
	login, err := entra.Serve(dir, o.entraListen, cert)
	if err != nil {
		return err
	}
	defer login.Close()
	srv.SetLoginEndpoint(login.URL())
	caFile := o.caFile
	if caFile == "" {
		dir := ""
		if o.state != "" {
			dir = filepath.Dir(o.state)
		} else if dir, err = os.MkdirTemp("", "winkube-emulator-"); err != nil {
			return err
		}
		caFile = filepath.Join(dir, "emulator-ca.pem")
	}
	if err := os.WriteFile(caFile, srv.CACertPEM(), 0o644); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "ARM emulator serving on %s, its Entra ID on %s\n\n", srv.URL(), login.URL())
	fmt.Fprintf(out, "Point the Azure SDK at it:\n")
	fmt.Fprintf(out, "  AZURE_RESOURCE_MANAGER_ENDPOINT=%s\n", srv.URL())
	fmt.Fprintf(out, "  AZURE_AUTHORITY_HOST=%s\n", login.URL())
	fmt.Fprintf(out, "  AZURE_CA_FILE=%s\n", caFile)
	if bootstrap != nil {
		fmt.Fprintf(out, "  AZURE_TENANT_ID=%s\n", bootstrap.TenantID)
		fmt.Fprintf(out, "  AZURE_CLIENT_ID=%s\n", bootstrap.ClientID)
		fmt.Fprintf(out, "  AZURE_CLIENT_SECRET=%s\n", bootstrapSecret)
	}
	fmt.Fprintf(out, "  IDENTITY_ENDPOINT=%s IDENTITY_HEADER=%s (managed identities)\n\n", login.ManagedIdentityEndpoint(), dir.IdentityHeader())
	fmt.Fprintf(out, "  (cloud.Configuration with authority host %s and ResourceManager endpoint and audience %s,\n   a transport that trusts %s, and an azidentity credential)\n", login.URL(), srv.URL(), caFile)
	fmt.Fprintf(out, "Counters: GET %s/emulator/counters   Faults: PUT %s/emulator/faults\n", srv.URL(), srv.URL())

	save := func() error {
		if o.state == "" {
			return nil
		}
		if err := dir.Save(dirState); err != nil {
			return err
		}
		return srv.Save(o.state)
	}
	tick := time.NewTicker(o.saveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := save(); err != nil {
				return fmt.Errorf("saving --state: %w", err)
			}
			if o.state != "" {
				fmt.Fprintf(out, "saved resources to %s\n", o.state)
			}
			return nil
		case <-tick.C:
			if err := save(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "saving --state: %v\n", err)
			}
		}
	}
}
