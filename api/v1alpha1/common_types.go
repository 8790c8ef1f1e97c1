package v1alpha1

// OSType is the operating system of a VM's OS disk.
// +kubebuilder:validation:Enum=Linux;Windows
type OSType string

const (
	// Linux nodes pass their names through and get an SSH key.
	Linux OSType = "Linux"
	// Windows nodes obey Azure's 15-character computer-name limit and get a
	// random admin password.
	Windows OSType = "Windows"
)

// WindowsServerVersion picks the Windows Server release of a default image.
// Process-isolated containers only run on a host of the same build.
// +kubebuilder:validation:Enum="2019";"2022";"2025"
type WindowsServerVersion string

const (
	WindowsServer2019 WindowsServerVersion = "2019"
	WindowsServer2022 WindowsServerVersion = "2022"
	WindowsServer2025 WindowsServerVersion = "2025"
)

// ContainerRuntime is the container runtime the node image carries.
// +kubebuilder:validation:Enum=containerd;dockershim
type ContainerRuntime string

const (
	Containerd ContainerRuntime = "containerd"
	// Dockershim (Docker EE on Windows) was removed from Kubernetes in 1.24.
	Dockershim ContainerRuntime = "dockershim"
)

// Image selects a VM image. Exactly one of its members is set; when the whole
// image is left out, winkube picks the default for the Kubernetes version.
type Image struct {
	// id is the ARM resource ID of a managed image.
	// +optional
	ID *string `json:"id,omitempty"`
	// marketplace is an Azure Marketplace image.
	// +optional
	Marketplace *MarketplaceImage `json:"marketplace,omitempty"`
	// computeGallery is an image from an Azure Compute Gallery: a private
	// gallery when subscriptionID and resourceGroup are set, otherwise a
	// community gallery named by its public name.
	// +optional
	ComputeGallery *ComputeGalleryImage `json:"computeGallery,omitempty"`
}

// MarketplaceImage is publisher:offer:sku:version.
type MarketplaceImage struct {
	// +kubebuilder:validation:MinLength=1
	Publisher string `json:"publisher"`
	// +kubebuilder:validation:MinLength=1
	Offer string `json:"offer"`
	// +kubebuilder:validation:MinLength=1
	SKU string `json:"sku"`
	// version is a dotted version such as 128.12.20240717, or "latest".
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// thirdPartyImage says the image needs a purchase plan.
	// +optional
	ThirdPartyImage bool `json:"thirdPartyImage,omitempty"`
}

// ComputeGalleryImage is an image definition version in a compute gallery.
type ComputeGalleryImage struct {
	// gallery is the gallery name, or a community gallery's public name.
	// +kubebuilder:validation:MinLength=1
	Gallery string `json:"gallery"`
	// name is the image definition.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// +optional
	SubscriptionID *string `json:"subscriptionID,omitempty"`
	// +optional
	ResourceGroup *string `json:"resourceGroup,omitempty"`
	// plan is the purchase plan of an image built from a marketplace image
	// sold through one: every VM made from it must name that plan (CAPZ's
	// computeGallery.plan).
	// +optional
	Plan *ImagePlan `json:"plan,omitempty"`
}

// ImagePlan is a marketplace purchase plan.
type ImagePlan struct {
	// +kubebuilder:validation:MinLength=1
	Publisher string `json:"publisher"`
	// +kubebuilder:validation:MinLength=1
	Offer string `json:"offer"`
	// +kubebuilder:validation:MinLength=1
	SKU string `json:"sku"`
}

// OSDisk is a VM's operating-system disk.
type OSDisk struct {
	// osType is Linux or Windows; it decides the naming, bootstrap and image rules.
	// +optional
	OSType OSType `json:"osType,omitempty"`
	// diskSizeGB is the size of the disk; defaulted to 128.
	// +optional
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=4095
	DiskSizeGB *int32 `json:"diskSizeGB,omitempty"`
	// +optional
	ManagedDisk *ManagedDiskParameters `json:"managedDisk,omitempty"`
	// cachingType is None, ReadOnly or ReadWrite.
	// +optional
	// +kubebuilder:validation:Enum=None;ReadOnly;ReadWrite
	CachingType string `json:"cachingType,omitempty"`
}

// ManagedDiskParameters are a managed disk's storage options.
type ManagedDiskParameters struct {
	// storageAccountType such as Premium_LRS or Standard_LRS.
	// +optional
	// +kubebuilder:validation:Enum=Standard_LRS;Premium_LRS;StandardSSD_LRS;UltraSSD_LRS;Premium_ZRS;StandardSSD_ZRS;PremiumV2_LRS
	StorageAccountType string `json:"storageAccountType,omitempty"`
}

// NetworkSpec is the cluster's network.
type NetworkSpec struct {
	// vnet is the virtual network; winkube creates it unless it already exists
	// (a user-provided VNet is never deleted).
	// +optional
	Vnet VnetSpec `json:"vnet,omitempty"`
	// subnets of the VNet; defaulted to one control-plane and one node subnet.
	// +optional
	// +listType=map
	// +listMapKey=name
	Subnets []SubnetSpec `json:"subnets,omitempty"`
	// apiServerLB is the load balancer in front of the API servers, which
	// also carries the inbound NAT rules for SSH to control-plane VMs.
	// +optional
	APIServerLB LoadBalancerSpec `json:"apiServerLB,omitempty"`
}

// VnetSpec is a virtual network.
type VnetSpec struct {
	// resourceGroup of the VNet; the cluster's resource group when empty.
	// +optional
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// cidrBlocks are the VNet's address spaces; defaulted to 10.0.0.0/8.
	// +optional
	CIDRBlocks []string `json:"cidrBlocks,omitempty"`
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
}

// SubnetRole says which machines a subnet holds.
// +kubebuilder:validation:Enum=control-plane;node
type SubnetRole string

const (
	SubnetControlPlane SubnetRole = "control-plane"
	SubnetNode         SubnetRole = "node"
)

// SubnetSpec is a subnet of the VNet.
type SubnetSpec struct {
	// +kubebuilder:validation:MinLength=1
	Name string     `json:"name"`
	Role SubnetRole `json:"role"`
	// +optional
	CIDRBlocks []string `json:"cidrBlocks,omitempty"`
	// securityGroup is the NSG of the subnet.
	// +optional
	SecurityGroup SecurityGroup `json:"securityGroup,omitempty"`
	// routeTableName, when set, attaches a route table (host-gw networking).
	// +optional
	RouteTableName string `json:"routeTableName,omitempty"`
	// natGatewayName, when set, gives the subnet outbound access through a NAT gateway.
	// +optional
	NatGatewayName string `json:"natGatewayName,omitempty"`
}

// SecurityGroup is a network security group.
type SecurityGroup struct {
	// +optional
	Name string `json:"name,omitempty"`
	// securityRules added to the ones winkube needs.
	// +optional
	// +listType=map
	// +listMapKey=name
	SecurityRules []SecurityRule `json:"securityRules,omitempty"`
}

// SecurityRule is one NSG rule.
type SecurityRule struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	Description string `json:"description,omitempty"`
	// +kubebuilder:validation:Enum=Tcp;Udp;Icmp;"*"
	Protocol string `json:"protocol"`
	// +kubebuilder:validation:Enum=Inbound;Outbound
	Direction string `json:"direction"`
	// priority orders rules; Azure allows 100 to 4096.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=4096
	Priority int32 `json:"priority"`
	// +optional
	SourcePorts string `json:"sourcePorts,omitempty"`
	// +optional
	DestinationPorts string `json:"destinationPorts,omitempty"`
	// +optional
	Source string `json:"source,omitempty"`
	// +optional
	Destination string `json:"destination,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=Allow;Deny
	Action string `json:"action,omitempty"`
}

// LoadBalancerType is Public or Internal.
// +kubebuilder:validation:Enum=Public;Internal
type LoadBalancerType string

// LoadBalancerSpec is the API server's load balancer.
type LoadBalancerSpec struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Type LoadBalancerType `json:"type,omitempty"`
	// privateIP of the frontend for an Internal load balancer.
	// +optional
	PrivateIP string `json:"privateIP,omitempty"`
}

// Future is a long-running ARM operation that a reconcile started and a later
// reconcile polls, so no worker blocks on Azure.
type Future struct {
	// type is the operation: PUT or DELETE.
	Type string `json:"type"`
	// serviceName is the winkube service (resource kind) that started it.
	ServiceName string `json:"serviceName"`
	// name of the resource.
	Name string `json:"name"`
	// +optional
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// data is the SDK poller's resume token.
	Data string `json:"data"`
}

// Futures is a list of long-running operations.
type Futures []Future

// AzureVMSpec is what a single VM and a scale set's VM model have in common.
type AzureVMSpec struct {
	// vmSize is an Azure VM size such as Standard_D4s_v3.
	// +required
	// +kubebuilder:validation:MinLength=1
	VMSize string `json:"vmSize,omitempty"`
	// image of the OS disk; the default for the Machine's Kubernetes version,
	// OS and Windows version when left out.
	// +optional
	Image *Image `json:"image,omitempty"`
	// osDisk is the operating-system disk; osType decides Linux or Windows.
	// +optional
	OSDisk OSDisk `json:"osDisk,omitempty"`
	// windowsServerVersion chooses the default Windows image's release;
	// defaulted to 2022 for Windows machines.
	// +optional
	WindowsServerVersion WindowsServerVersion `json:"windowsServerVersion,omitempty"`
	// containerRuntime of the default image; defaulted to containerd.
	// +optional
	ContainerRuntime ContainerRuntime `json:"containerRuntime,omitempty"`
	// sshPublicKey is the base64-encoded OpenSSH public key of user capi on
	// Linux; one is generated when left out. Windows nodes take their keys from
	// the bootstrap data's users[].sshAuthorizedKeys instead.
	// +optional
	SSHPublicKey string `json:"sshPublicKey,omitempty"`
	// acceleratedNetworking on the NIC; unset follows the VM size (on where
	// the size supports it).
	// +optional
	AcceleratedNetworking *bool `json:"acceleratedNetworking,omitempty"`
	// identity is the VM's managed identity, as CAPZ has it: None,
	// SystemAssigned (made with the VM; winkube grants it
	// systemAssignedIdentityRole) or UserAssigned (userAssignedIdentities,
	// made by you). The cloud provider on the node authenticates with it
	// when set: azure.json's useManagedIdentityExtension.
	// +kubebuilder:validation:Enum=None;SystemAssigned;UserAssigned
	// +optional
	Identity VMIdentity `json:"identity,omitempty"`
	// userAssignedIdentities are the identities attached to the VM with
	// identity UserAssigned; the first is the cloud provider's.
	// +optional
	// +listType=atomic
	UserAssignedIdentities []UserAssignedIdentity `json:"userAssignedIdentities,omitempty"`
	// systemAssignedIdentityRole is the role assignment winkube makes for
	// a SystemAssigned identity; by default Contributor on the cluster's
	// resource group, which is what the cloud provider changes.
	// +optional
	SystemAssignedIdentityRole *SystemAssignedIdentityRole `json:"systemAssignedIdentityRole,omitempty"`
	// enableIPForwarding lets the NIC receive and send traffic for
	// addresses other than its own, which Azure drops otherwise: needed
	// where the route table sends pod CIDRs to the node (host-gw, as
	// cloud-provider-azure's route controller programs it). CAPZ's
	// AzureMachineSpec has the same field.
	// +optional
	EnableIPForwarding bool `json:"enableIPForwarding,omitempty"`
}

// VMIdentity is the kind of a VM's managed identity.
type VMIdentity string

// VM identities, CAPZ's names.
const (
	VMIdentityNone           VMIdentity = "None"
	VMIdentitySystemAssigned VMIdentity = "SystemAssigned"
	VMIdentityUserAssigned   VMIdentity = "UserAssigned"
)

// UserAssignedIdentity is a user-assigned managed identity made outside
// winkube.
type UserAssignedIdentity struct {
	// providerID is the identity's ARM ID, with or without CAPZ's azure://
	// prefix: /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>.
	// +kubebuilder:validation:MinLength=1
	ProviderID string `json:"providerID"`
}

// SystemAssignedIdentityRole is the role assignment of a system-assigned
// identity.
type SystemAssignedIdentityRole struct {
	// name of the role assignment, a GUID; by default one derived from the
	// VM and the role, the same on every reconcile.
	// +optional
	Name string `json:"name,omitempty"`
	// definitionID is the role definition's ID or its GUID; Contributor
	// (b24988ac-6180-42a0-ab88-20f7382dd24c) by default.
	// +optional
	DefinitionID string `json:"definitionID,omitempty"`
	// scope is where the role applies; the cluster's resource group by
	// default.
	// +optional
	Scope string `json:"scope,omitempty"`
}

// What an object created in Azure, and its operations under way, are kept
// in annotations as well as in its status: clusterctl move creates the
// objects in the target cluster without their status. Only the manager
// changes them on an existing object (its webhooks refuse anyone else);
// whoever creates an object may write them, and the controllers prove each
// recorded resource in Azure before acting on it.
const (
	CreatedResourcesAnnotation = "infrastructure.winkube.dev/created-resources"
	OperationsAnnotation       = "infrastructure.winkube.dev/operations"
)
