// Package azurejson builds the Azure cloud provider's config file
// (azure.json) that cloud-provider-azure's controller manager and node
// manager read, and the Secret Cluster API Provider Azure delivers it in:
// <AzureMachineTemplate, AzureMachinePool or AzureMachine>-azure-json, with
// the keys control-plane-azure.json and worker-node-azure.json, which the
// bootstrap configs write to /etc/kubernetes/azure.json (Linux) and
// c:/k/azure.json (Windows). Field names are cloud-provider-azure's
// (pkg/provider/config Config).
package azurejson

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Names of the Secret and its keys.
const (
	SecretSuffix    = "-azure-json"
	ControlPlaneKey = "control-plane-azure.json"
	WorkerNodeKey   = "worker-node-azure.json"
	// Cloud is Azure's public cloud, as the SDK's environments name it.
	Cloud = "AzurePublicCloud"
	// MaxLoadBalancerRules is Azure's limit of rules per load balancer,
	// the value CAPZ writes.
	MaxLoadBalancerRules = 250
	// BackendPoolNodeIP is cloud-provider-azure's IP-based backend pool
	// configuration.
	BackendPoolNodeIP = "nodeIP"
)

// Config is azure.json.
type Config struct {
	Cloud          string `json:"cloud"`
	TenantID       string `json:"tenantId"`
	SubscriptionID string `json:"subscriptionId"`
	// Either a service principal ...
	AADClientID     string `json:"aadClientId,omitempty"`
	AADClientSecret string `json:"aadClientSecret,omitempty"`
	// ... or the VM's managed identity.
	UseManagedIdentityExtension bool   `json:"useManagedIdentityExtension"`
	UserAssignedIdentityID      string `json:"userAssignedIdentityID,omitempty"`

	ResourceGroup                string `json:"resourceGroup"`
	Location                     string `json:"location"`
	VMType                       string `json:"vmType"`
	VnetName                     string `json:"vnetName"`
	VnetResourceGroup            string `json:"vnetResourceGroup"`
	SubnetName                   string `json:"subnetName"`
	SecurityGroupName            string `json:"securityGroupName"`
	SecurityGroupResourceGroup   string `json:"securityGroupResourceGroup"`
	RouteTableName               string `json:"routeTableName"`
	LoadBalancerSku              string `json:"loadBalancerSku"`
	MaximumLoadBalancerRuleCount int    `json:"maximumLoadBalancerRuleCount"`
	// LoadBalancerBackendPoolConfigurationType "nodeIP" has the cloud
	// provider put the nodes' private addresses in its load balancer's
	// backend pool (IP-based) rather than the NICs of VMs and scale-set
	// instances (nodeIPConfiguration, its default).
	LoadBalancerBackendPoolConfigurationType string `json:"loadBalancerBackendPoolConfigurationType"`
	UseInstanceMetadata                      bool   `json:"useInstanceMetadata"`
}

// Credentials are how the cloud provider authenticates to ARM. The
// identity work (AzureClusterIdentity) fills ClientID and ClientSecret for a
// service principal; without them the VM's managed identity is used.
type Credentials struct {
	TenantID     string
	ClientID     string
	ClientSecret string
	// UserAssignedIdentityID selects a user-assigned managed identity.
	UserAssignedIdentityID string
}

// Network is where the cluster's nodes are.
type Network struct {
	SubscriptionID, ResourceGroup, Location       string
	VnetName, VnetResourceGroup                   string
	SubnetName, SecurityGroupName, RouteTableName string
}

// New builds the config for a cluster's network with credentials.
func New(n Network, c Credentials) Config {
	cfg := Config{
		Cloud: Cloud, TenantID: c.TenantID, SubscriptionID: n.SubscriptionID,
		ResourceGroup: n.ResourceGroup, Location: n.Location,
		// "vmss" covers standalone VMs and scale sets, as CAPZ writes it.
		VMType: "vmss", VnetName: n.VnetName, VnetResourceGroup: n.VnetResourceGroup,
		SubnetName: n.SubnetName, SecurityGroupName: n.SecurityGroupName, SecurityGroupResourceGroup: n.ResourceGroup,
		RouteTableName: n.RouteTableName, LoadBalancerSku: "Standard", MaximumLoadBalancerRuleCount: MaxLoadBalancerRules,
		// IP-based backend pools: one way for standalone VMs and scale-set
		// instances alike, Windows and Linux, with no PUT of a NIC or a
		// scale-set model (and no rolling of its instances) when nodes
		// come and go; Azure supports them for Standard load balancers
		// whose backends are in one virtual network, which a cluster's
		// nodes are.
		LoadBalancerBackendPoolConfigurationType: BackendPoolNodeIP,
		UseInstanceMetadata:                      true,
	}
	if c.ClientID != "" && c.ClientSecret != "" {
		cfg.AADClientID, cfg.AADClientSecret = c.ClientID, c.ClientSecret
	} else {
		cfg.UseManagedIdentityExtension, cfg.UserAssignedIdentityID = true, c.UserAssignedIdentityID
	}
	return cfg
}

// Secret is the <owner>-azure-json Secret of an AzureMachineTemplate,
// AzureMachinePool or AzureMachine, labelled with its cluster and owned by
// owner, so that it goes with it.
func Secret(ownerName, namespace, clusterName string, owner metav1.OwnerReference, controlPlane, worker Config) (*corev1.Secret, error) {
	cp, err := json.MarshalIndent(controlPlane, "", "    ")
	if err != nil {
		return nil, err
	}
	w, err := json.MarshalIndent(worker, "", "    ")
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ownerName + SecretSuffix, Namespace: namespace,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: clusterName},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{ControlPlaneKey: cp, WorkerNodeKey: w},
	}, nil
}
