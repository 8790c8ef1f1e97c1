package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/machinelogs"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodelogs"
)

// runCommandTransport is Azure's Run Command: it returns the last 4,096
// bytes of each stream
// (https://learn.microsoft.com/azure/virtual-machines/windows/run-command#restrictions).
var runCommandTransport = nodelogs.Transport{Name: machinelogs.FromRunCommand, Limit: 4096}

// runCommandRunner runs each command as a Run Command script of one line.
type runCommandRunner struct {
	ctx    context.Context
	logs   *machinelogs.Service
	target machinelogs.Target
}

// Run runs cmd on the machine. Azure reports no exit status, so a command
// failed when it wrote to its error stream: PowerShell's cmdlets and the
// shell's commands say there why they failed.
func (r runCommandRunner) Run(cmd string, stdout, stderr io.Writer) error {
	out, errOut, err := r.logs.Run(r.ctx, r.target, []string{cmd})
	if err != nil {
		return fmt.Errorf("Run Command: %w", err)
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		return err
	}
	if strings.TrimSpace(errOut) != "" {
		_, _ = io.WriteString(stderr, errOut)
		return errors.New("it wrote to its error stream")
	}
	return nil
}

// runCommand finds the machine name means and a runner acting as its
// cluster's identity, in the cluster's cloud: the local world's Azure
// (arm-endpoint.json in its state) with --local or --state-dir, else
// Azure's public cloud unless the AzureCluster names another
// (spec.azureEnvironment, as the provider reads it). The AzureCluster is
// anyone's with write access to its namespace, so a Custom cloud's hosts,
// which receive the identity's secret, must be the local world's or ones
// the user passed (--custom-cloud), as the manager's operator does.
func (o *accessOptions) runCommand(ctx context.Context, c client.Client, ns, name string, clouds []cloud.CustomCloud) (*azureMachine, runCommandRunner, error) {
	m, err := findAzureMachine(ctx, c, ns, name, o.cluster)
	if err != nil {
		return nil, runCommandRunner{}, err
	}
	svc, err := clusterServices(ctx, c, m.cluster, o.stateDir, clouds, o.useMyAzureLogin)
	if err != nil {
		return nil, runCommandRunner{}, err
	}
	return m, runCommandRunner{ctx: ctx, logs: svc.BootLogs, target: m.target}, nil
}

// clusterServices is Azure as the cluster's identity reaches it: in the
// local world's Azure (arm-endpoint.json in stateDir) when stateDir is
// set, else in the cloud the cluster names. A cluster without an
// identityRef is acted on with the user's own Azure login only when
// useMyLogin says the user chose to (--use-my-azure-login).
func clusterServices(ctx context.Context, c client.Client, ac *infrav1.AzureCluster, stateDir string, clouds []cloud.CustomCloud, useMyLogin bool) (*cloud.Services, error) {
	cfg := endpoint.Config{}
	var err error
	if stateDir != "" {
		if cfg, err = localworld.ReadARMEndpoint(filepath.Join(stateDir, localworld.ARMEndpointFile)); err != nil {
			return nil, err
		}
	} else if ac.Spec.IdentityRef == nil {
		// The AzureCluster's spec (its resource group, VNet, subscription)
		// may be written by a tenant of the management cluster; acting
		// there with the user's own login, which may reach far more than
		// any identity the operator allowed the tenant, would let the
		// tenant aim the user's rights (a confused deputy). So the user
		// says so explicitly, having read where it would act.
		if !useMyLogin {
			return nil, refuseOwnLogin(ac)
		}
		// A cluster without an identity is the manager's own credential's;
		// here that is the user's (az login, environment, managed identity).
		if cfg.Credential, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
			return nil, fmt.Errorf("AzureCluster %s has no identityRef, and no Azure credential of yours was found (az login, or AZURE_CLIENT_ID and AZURE_CLIENT_SECRET): %w", ac.Name, err)
		}
	}
	// Without an identityRef the credential is the user's own: it may
	// serve any namespace the user's kubeconfig reaches. A UserAssignedMSI
	// identity is proven by the managed identity of the host winkube runs
	// on, the user's too: whoever wrote the identity chose which principal
	// that host acts as, so it is honoured only when the user says so.
	ids := &controllers.Identities{Client: c, Reader: c, Cloud: cloud.New(cfg), CustomClouds: clouds, ManagerCredentialNamespaces: []string{controllers.AllNamespaces}}
	if useMyLogin {
		ids.AmbientIdentityNamespaces = []string{controllers.AllNamespaces}
	}
	svc, err := ids.Services(ctx, ac)
	if controllers.IdentityErrorReason(err) == controllers.AmbientIdentityNotAllowedReason {
		return nil, fmt.Errorf("AzureCluster %s/%s names a managed or workload identity, whose token would come from this host's own managed identity: check that you trust whoever wrote the AzureClusterIdentity, then pass --use-my-azure-login", ac.Namespace, ac.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("acting as the identity of AzureCluster %s: %w", ac.Name, err)
	}
	return svc, nil
}

// useMyAzureLoginUsage is --use-my-azure-login's help.
const useMyAzureLoginUsage = "when the AzureCluster has no identityRef, act in its subscription, resource group and VNet with your own Azure login (az login, environment, managed identity), and when its identity is a UserAssignedMSI, let this host's managed identity prove it; without it winkube refuses, since whoever wrote the AzureCluster and its identity chose where your rights are used"

// refuseOwnLogin is the error for a cluster without an identityRef when
// the user did not pass --use-my-azure-login: where winkube would act.
func refuseOwnLogin(ac *infrav1.AzureCluster) error {
	sub := ac.Spec.SubscriptionID
	if sub == "" {
		sub = "(none set: your login's default)"
	}
	vnet := ac.Spec.NetworkSpec.Vnet
	vnetRG := vnet.ResourceGroup
	if vnetRG == "" {
		vnetRG = ac.Spec.ResourceGroup
	}
	return fmt.Errorf("AzureCluster %s/%s has no identityRef, so winkube would act with your own Azure login in subscription %s, resource group %s, VNet %s (resource group %s), as that AzureCluster's spec says: "+
		"check that you trust whoever wrote it and that these are yours, then pass --use-my-azure-login; or give the cluster an identityRef", ac.Namespace, ac.Name, sub, ac.Spec.ResourceGroup, orNone(vnet.Name), vnetRG)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
