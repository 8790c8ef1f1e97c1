package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IdentityType is how an AzureClusterIdentity authenticates to Entra ID.
// +kubebuilder:validation:Enum=ServicePrincipal;ServicePrincipalCertificate;WorkloadIdentity;UserAssignedMSI
type IdentityType string

const (
	// ServicePrincipal authenticates with a client secret, read from the
	// Secret's key "clientSecret".
	ServicePrincipal IdentityType = "ServicePrincipal"
	// ServicePrincipalCertificate authenticates with a certificate and its
	// private key (PEM) from the Secret's key "certificate", encrypted with
	// the key "password" when that is present.
	ServicePrincipalCertificate IdentityType = "ServicePrincipalCertificate"
	// WorkloadIdentity exchanges the manager's projected service-account
	// token for an Entra token through a federated credential of clientID.
	WorkloadIdentity IdentityType = "WorkloadIdentity"
	// UserAssignedMSI is a user-assigned managed identity of the machine or
	// pod the manager runs on, chosen by clientID.
	UserAssignedMSI IdentityType = "UserAssignedMSI"
)

// Keys of an identity's Secret.
const (
	ClientSecretKey        = "clientSecret"
	ClientCertificateKey   = "certificate"
	CertificatePasswordKey = "password"
)

// AllowedNamespaces selects the namespaces whose AzureClusters may use an
// identity. As in CAPZ: a nil allowedNamespaces allows no namespace, an
// empty one ({}) every namespace; otherwise a namespace is allowed when it
// is in list or its labels match selector.
type AllowedNamespaces struct {
	// list names allowed namespaces.
	// +optional
	// +listType=set
	NamespaceList []string `json:"list,omitempty"`
	// selector matches allowed namespaces by their labels; an empty
	// selector matches none.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// AzureClusterIdentitySpec is who winkube acts as in Azure for the
// clusters that reference the identity.
type AzureClusterIdentitySpec struct {
	// type is how the identity authenticates.
	// +required
	Type IdentityType `json:"type"`
	// tenantID is the Entra ID tenant of the identity.
	// +optional
	TenantID string `json:"tenantID,omitempty"`
	// clientID is the application (client) ID of the service principal or
	// of the managed identity.
	// +required
	// +kubebuilder:validation:MinLength=1
	ClientID string `json:"clientID"`
	// clientSecret references the Secret holding the client secret or the
	// certificate (ServicePrincipal, ServicePrincipalCertificate); its
	// namespace defaults to the identity's.
	// +optional
	ClientSecret corev1.SecretReference `json:"clientSecret,omitempty,omitzero"`
	// allowedNamespaces are the namespaces whose clusters may use the
	// identity; nil allows none, {} allows all.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`
}

// AzureClusterIdentityStatus is the observed state.
type AzureClusterIdentityStatus struct {
	// conditions of the identity.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azureclusteridentities,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type="string",JSONPath=".spec.type"
// +kubebuilder:printcolumn:name="Client",type="string",JSONPath=".spec.clientID"

// AzureClusterIdentity is an Azure identity that AzureClusters reference;
// each cluster's Azure calls are made as its identity.
type AzureClusterIdentity struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AzureClusterIdentitySpec   `json:"spec,omitempty"`
	Status AzureClusterIdentityStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AzureClusterIdentityList is a list of AzureClusterIdentities.
type AzureClusterIdentityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureClusterIdentity `json:"items"`
}

// IdentityReference names an AzureClusterIdentity.
type IdentityReference struct {
	// name of the AzureClusterIdentity.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// namespace of the AzureClusterIdentity; defaults to the cluster's.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// AzureEnvironmentName names an Azure cloud.
// +kubebuilder:validation:Enum=AzurePublicCloud;AzureUSGovernmentCloud;AzureChinaCloud;Custom
type AzureEnvironmentName string

// Azure clouds.
const (
	AzurePublicCloud       AzureEnvironmentName = "AzurePublicCloud"
	AzureUSGovernmentCloud AzureEnvironmentName = "AzureUSGovernmentCloud"
	AzureChinaCloud        AzureEnvironmentName = "AzureChinaCloud"
	AzureCustomCloud       AzureEnvironmentName = "Custom"
)

// AzureEnvironment is the Azure cloud a cluster lives in.
type AzureEnvironment struct {
	// name of the cloud; Custom needs resourceManagerEndpoint and
	// activeDirectoryAuthorityHost.
	// +required
	Name AzureEnvironmentName `json:"name"`
	// resourceManagerEndpoint of a Custom cloud, such as https://management.contoso.example.
	// +optional
	ResourceManagerEndpoint string `json:"resourceManagerEndpoint,omitempty"`
	// activeDirectoryAuthorityHost of a Custom cloud's Entra ID, such as https://login.contoso.example.
	// +optional
	ActiveDirectoryAuthorityHost string `json:"activeDirectoryAuthorityHost,omitempty"`
}

func init() {
	register(&AzureClusterIdentity{}, &AzureClusterIdentityList{})
}
