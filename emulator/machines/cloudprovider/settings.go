package cloudprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
)

// Defaults of cloud-provider-azure's controller manager and of its config.
const (
	// DefaultClusterName is --cluster-name's default: the load balancer's
	// and its backend pool's name.
	DefaultClusterName = "kubernetes"
	// DefaultCloudConfig is where the chart mounts azure.json.
	DefaultCloudConfig = "/etc/kubernetes/azure.json"
	// InternalSuffix ends the internal load balancer's name.
	InternalSuffix = "-internal"
	// NodeIP is the loadBalancerBackendPoolConfigurationType that puts the
	// nodes' private addresses in an IP-based backend pool; Azure's cloud
	// provider defaults to nodeIPConfiguration (the NICs join the pool).
	NodeIP = "nodeIP"
)

// Settings are what the running cloud-controller-manager was started with:
// its flags and the cloud config (azure.json) on the node it runs on.
type Settings struct {
	ClusterName string
	// ConfigPath is the cloud config's path on Node.
	ConfigPath, Node string
	// Controllers is --controllers (nil: all).
	Controllers []string
	Config      AzureConfig
	// Env is the container's environment (literal values): the Azure SDK's
	// AZURE_* variables override the file's credential.
	Env map[string]string
	// net is Azure's network as the controller manager reaches it with
	// Config's credential, once connected.
	net Network
}

// AzureConfig holds the fields of azure.json the service controller uses,
// named as cloud-provider-azure names them.
type AzureConfig struct {
	SubscriptionID            string `json:"subscriptionId"`
	ResourceGroup             string `json:"resourceGroup"`
	Location                  string `json:"location"`
	VnetName                  string `json:"vnetName"`
	VnetResourceGroup         string `json:"vnetResourceGroup"`
	SubnetName                string `json:"subnetName"`
	LoadBalancerSku           string `json:"loadBalancerSku"`
	LoadBalancerName          string `json:"loadBalancerName"`
	LoadBalancerResourceGroup string `json:"loadBalancerResourceGroup"`
	BackendPoolType           string `json:"loadBalancerBackendPoolConfigurationType"`
	DisableOutboundSNAT       bool   `json:"disableOutboundSNAT"`
	// SecurityGroupName is the NSG the service controller writes its
	// rules on, in SecurityGroupResourceGroup (default ResourceGroup).
	SecurityGroupName          string `json:"securityGroupName"`
	SecurityGroupResourceGroup string `json:"securityGroupResourceGroup"`
	// The credential fields, named as cloud-provider-azure v1.36.5 names
	// them (pkg/azclient/auth_conf.go and arm_conf.go, commit 9da1599).
	TenantID                    string `json:"tenantId"`
	AADClientID                 string `json:"aadClientId"`
	AADClientSecret             string `json:"aadClientSecret"`
	AADClientCertPath           string `json:"aadClientCertPath"`
	UseManagedIdentityExtension bool   `json:"useManagedIdentityExtension"`
	UserAssignedIdentityID      string `json:"userAssignedIdentityID"`
	AADFederatedTokenFile       string `json:"aadFederatedTokenFile"`
	UseFederatedWorkload        bool   `json:"useFederatedWorkloadIdentityExtension"`
	AADMSIDataPlaneIdentityPath string `json:"aadMSIDataPlaneIdentityPath"`
}

// Credentials are what the cloud config says the controller manager
// authenticates to ARM with, and where its managed identity would come
// from: exactly one of a client secret, a managed identity (the VM's
// Instance Metadata Service) or none.
type Credentials struct {
	// Node is the node the controller manager runs on, ConfigPath the
	// cloud config it read there.
	Node, ConfigPath string
	TenantID         string
	// ClientID and ClientSecret are a service principal's (aadClientId,
	// aadClientSecret).
	ClientID, ClientSecret string
	// ManagedIdentity is useManagedIdentityExtension; UserAssignedID is
	// userAssignedIdentityID: a client ID, or a resource ID when it holds
	// /subscriptions/.
	ManagedIdentity bool
	UserAssignedID  string
	// IMDS is the base URL of the node's VM's Instance Metadata Service.
	IMDS string
}

// Key tells credentials apart, so that clients made for one are kept for it.
func (c Credentials) Key() string {
	return strings.Join([]string{c.Node, c.TenantID, c.ClientID, c.ClientSecret, fmt.Sprint(c.ManagedIdentity), c.UserAssignedID, c.IMDS}, "\x00")
}

// ErrNoAuth is cloud-provider-azure's error for a cloud config with no
// credential (v1.36.5 pkg/provider/config/azure_auth.go ErrorNoAuth). With
// useInstanceMetadata the process starts anyway, without an ARM
// credential, and its ARM calls cannot be authorized.
var ErrNoAuth = errors.New("no credentials provided for Azure cloud provider")

// credentials picks the credential as cloud-provider-azure v1.36.5 does
// (pkg/azclient/auth.go NewAuthProvider, commit 9da1599): workload
// identity, then the managed identity, then a client secret, then a
// client certificate, then the MSI data-plane identity. The container's
// AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and
// AZURE_FEDERATED_TOKEN_FILE win over the file (auth_conf.go, arm_conf.go).
// Workload identity, certificates and the data-plane identity are files
// the local world does not put on nodes: they are refused with what to use
// instead. With none, the real process starts without a credential (with
// useInstanceMetadata) and cannot call ARM: ErrNoAuth. The simulated
// kubelet does not let such a controller manager become Ready (see
// components' CloudConfig check), so only a controller fed a Ready pod by
// hand gets here.
func (s Settings) credentials(imds func(node string) string) (Credentials, error) {
	c := s.Config
	env := func(name, file string) string {
		if v := s.Env[name]; v != "" {
			return v
		}
		return file
	}
	cr := Credentials{Node: s.Node, ConfigPath: s.ConfigPath, TenantID: env("AZURE_TENANT_ID", c.TenantID)}
	switch {
	case c.UseFederatedWorkload || s.Env["AZURE_FEDERATED_TOKEN_FILE"] != "":
		return cr, fmt.Errorf("the cloud config %s asks for workload identity: the local world has no workload-identity webhook; use a managed identity or a client secret", s.ConfigPath)
	case c.UseManagedIdentityExtension:
		cr.ManagedIdentity, cr.UserAssignedID = true, c.UserAssignedIdentityID
		if imds != nil {
			cr.IMDS = imds(s.Node)
		}
	case env("AZURE_CLIENT_SECRET", c.AADClientSecret) != "":
		cr.ClientID, cr.ClientSecret = env("AZURE_CLIENT_ID", c.AADClientID), env("AZURE_CLIENT_SECRET", c.AADClientSecret)
	case c.AADClientCertPath != "":
		return cr, fmt.Errorf("the cloud config %s names a client certificate (%s): the local world's Entra ID takes client secrets only; use aadClientSecret or a managed identity", s.ConfigPath, c.AADClientCertPath)
	case c.AADMSIDataPlaneIdentityPath != "":
		return cr, fmt.Errorf("the cloud config %s names an MSI data-plane identity (%s): the local world has none; use a managed identity or a client secret", s.ConfigPath, c.AADMSIDataPlaneIdentityPath)
	default:
		return cr, ErrNoAuth
	}
	return cr, nil
}

// CredentialsFor picks the credential a cloud config and a container's
// AZURE_* variables name, as cloud-provider-azure does (credentials): for
// other Azure components that read the same azure.json through its config
// loader, such as the Azure Disk CSI driver (kubernetes-sigs/azuredisk-csi-driver
// v1.34.5 pkg/azureutils/azure_disk_utils.go GetCloudProviderFromClient, which
// builds cloud-provider-azure's client from it). path names where the config
// was read, node the node the process runs on.
func CredentialsFor(cfg AzureConfig, env map[string]string, node, path string, imds func(node string) string) (Credentials, error) {
	return Settings{Config: cfg, Env: env, Node: node, ConfigPath: path}.credentials(imds)
}

// AzureEnv is a container's AZURE_* variables with literal values, which
// win over the cloud config's credential.
func AzureEnv(c corev1.Container) map[string]string {
	var env map[string]string
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "AZURE_") && e.Value != "" {
			if env == nil {
				env = map[string]string{}
			}
			env[e.Name] = e.Value
		}
	}
	return env
}

// HasCredential says whether cloud-provider-azure finds an ARM credential
// in the cloud config and the container's AZURE_* variables.
func HasCredential(c AzureConfig, env map[string]string) bool {
	_, err := Settings{Config: c, Env: env}.credentials(nil)
	return !errors.Is(err, ErrNoAuth)
}

// connect reaches Azure's network as the cloud config's credential.
func (c *Controller) connect(st *Settings) error {
	if c.cfg.Connect == nil {
		return fmt.Errorf("no cloud to program: the machine runtime was started without an ARM endpoint")
	}
	cr, err := st.credentials(c.cfg.IMDS)
	if err != nil {
		return err
	}
	st.net, err = c.cfg.Connect(cr)
	return err
}

// settings reads the controller manager's flags from its container and its
// cloud config from the node's disk, as the process does when it starts.
func settings(pod *corev1.Pod, c corev1.Container, read func(node, path string) ([]byte, error)) (Settings, error) {
	s := Settings{ClusterName: DefaultClusterName, ConfigPath: DefaultCloudConfig, Node: pod.Spec.NodeName}
	if v, ok := containerruntime.Arg(c, "--cluster-name"); ok && v != "" {
		s.ClusterName = v
	}
	if v, ok := containerruntime.Arg(c, "--cloud-config"); ok && v != "" {
		s.ConfigPath = v
	}
	if v, ok := containerruntime.Arg(c, "--controllers"); ok {
		s.Controllers = strings.Split(v, ",")
	}
	s.Env = AzureEnv(c)
	if read == nil {
		return s, fmt.Errorf("the cloud config %s on node %s cannot be read here", s.ConfigPath, s.Node)
	}
	data, err := read(s.Node, s.ConfigPath)
	if err != nil {
		return s, fmt.Errorf("reading the cloud config %s on node %s: %w", s.ConfigPath, s.Node, err)
	}
	if err := json.Unmarshal(data, &s.Config); err != nil {
		return s, fmt.Errorf("the cloud config %s on node %s is not JSON: %w", s.ConfigPath, s.Node, err)
	}
	return s, nil
}

// runsServiceController says whether --controllers enables the service
// controller, as the controller manager reads the list: "*" is every
// default controller, "-name" turns one off.
func (s Settings) runsServiceController() bool {
	if s.Controllers == nil {
		return true
	}
	on := false
	for _, c := range s.Controllers {
		switch strings.TrimSpace(c) {
		case "-service":
			return false
		case "*", "service":
			on = true
		}
	}
	return on
}

// lbRef names the cluster's public or internal load balancer:
// loadBalancerName from the config, else the cluster name, in
// loadBalancerResourceGroup, else resourceGroup.
func (s Settings) lbRef(internal bool) Ref {
	name := s.ClusterName
	if s.Config.LoadBalancerName != "" {
		name = s.Config.LoadBalancerName
	}
	if internal {
		name += InternalSuffix
	}
	rg := s.Config.ResourceGroup
	if s.Config.LoadBalancerResourceGroup != "" {
		rg = s.Config.LoadBalancerResourceGroup
	}
	return Ref{SubscriptionID: s.Config.SubscriptionID, ResourceGroup: rg, Name: name}
}

// vnetID is the virtual network the nodes' addresses are in.
func (s Settings) vnetID() string {
	rg := s.Config.VnetResourceGroup
	if rg == "" {
		rg = s.Config.ResourceGroup
	}
	return Ref{SubscriptionID: s.Config.SubscriptionID, ResourceGroup: rg, Name: s.Config.VnetName}.ID("Microsoft.Network/virtualNetworks")
}

// nsgRef names the NSG the rules go on: securityGroupName in
// securityGroupResourceGroup, else resourceGroup (cloud-provider-azure
// v1.36.5 pkg/provider/azure.go).
func (s Settings) nsgRef() Ref {
	rg := s.Config.SecurityGroupResourceGroup
	if rg == "" {
		rg = s.Config.ResourceGroup
	}
	return Ref{SubscriptionID: s.Config.SubscriptionID, ResourceGroup: rg, Name: s.Config.SecurityGroupName}
}

// problem is what in the config keeps the service controller from
// programming load balancers here, with what to change; "" when nothing.
func (s Settings) problem() string {
	c := s.Config
	var missing []string
	for f, v := range map[string]string{"subscriptionId": c.SubscriptionID, "resourceGroup": c.ResourceGroup, "location": c.Location, "vnetName": c.VnetName} {
		if v == "" {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("the cloud config %s on node %s lacks %s", s.ConfigPath, s.Node, strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	if !strings.EqualFold(c.LoadBalancerSku, "standard") {
		return fmt.Sprintf("the cloud config %s says loadBalancerSku %q: the local world simulates Standard load balancers only; set \"loadBalancerSku\": \"Standard\" (Basic load balancers are retired on Azure)", s.ConfigPath, c.LoadBalancerSku)
	}
	if !strings.EqualFold(c.BackendPoolType, NodeIP) {
		t := c.BackendPoolType
		if t == "" {
			t = "nodeIPConfiguration (the default)"
		}
		return fmt.Sprintf("the cloud config %s says loadBalancerBackendPoolConfigurationType %s: the local world's cloud-controller-manager programs IP-based backend pools only; set \"loadBalancerBackendPoolConfigurationType\": \"nodeIP\"", s.ConfigPath, t)
	}
	return ""
}
