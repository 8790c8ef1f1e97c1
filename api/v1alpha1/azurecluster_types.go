package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// ClusterFinalizer lets the AzureCluster controller delete what it created
	// before the object goes away.
	ClusterFinalizer = "azurecluster.infrastructure.winkube.dev"

	// ServicesEndpointConfigMap is the workload cluster's
	// kube-system ConfigMap with KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT: the API server's load-balanced address,
	// for what runs on a Windows host before kube-proxy does (Calico).
	// The provider publishes it, wrapped for a ClusterResourceSet, as
	// the management ConfigMap <cluster>ServicesEndpointSuffix.
	ServicesEndpointConfigMap = "kubernetes-services-endpoint"
	ServicesEndpointSuffix    = "-" + ServicesEndpointConfigMap
)

// AzureClusterSpec is the desired Azure infrastructure of a cluster.
type AzureClusterSpec struct {
	// subscriptionID is the Azure subscription the cluster lives in.
	// +required
	// +kubebuilder:validation:MinLength=1
	SubscriptionID string `json:"subscriptionID,omitempty"`
	// location is the Azure region, such as westeurope.
	// +required
	// +kubebuilder:validation:MinLength=1
	Location string `json:"location,omitempty"`
	// resourceGroup holds every resource of the cluster; defaulted to the cluster name.
	// +optional
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// networkSpec is the VNet, subnets and API-server load balancer.
	// +optional
	NetworkSpec NetworkSpec `json:"networkSpec,omitempty"`
	// controlPlaneEndpoint is set by winkube from the API-server load balancer.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`
	// additionalTags are added to every Azure resource of the cluster.
	// +optional
	AdditionalTags map[string]string `json:"additionalTags,omitempty"`
	// identityRef is the AzureClusterIdentity the cluster's Azure calls are
	// made as; without it the manager's own credential is used.
	// +optional
	IdentityRef *IdentityReference `json:"identityRef,omitempty"`
	// azureEnvironment is the Azure cloud; the manager's own (Azure public
	// cloud unless it was started with other endpoints) when unset.
	// +optional
	AzureEnvironment *AzureEnvironment `json:"azureEnvironment,omitempty"`
}

// AzureClusterInitializationStatus is the Cluster API contract's
// initialization report.
// +kubebuilder:validation:MinProperties=1
type AzureClusterInitializationStatus struct {
	// provisioned is true when the cluster's infrastructure exists.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// AzureClusterStatus is the observed state.
type AzureClusterStatus struct {
	// +optional
	Initialization AzureClusterInitializationStatus `json:"initialization,omitempty,omitzero"`
	// failureDomains are the availability zones of the location.
	// +optional
	// +listType=map
	// +listMapKey=name
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`
	// conditions; Ready sums them up.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// createdResources are the ARM IDs of subnets winkube added to a VNet it
	// does not own (subnets carry no tags of their own). Each is recorded
	// before it is created; deletion removes exactly these, so a subnet the
	// user made is never touched.
	// +optional
	// +listType=set
	CreatedResources []string `json:"createdResources,omitempty"`
	// longRunningOperationStates are ARM operations still under way.
	// +optional
	LongRunningOperationStates Futures `json:"longRunningOperationStates,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azureclusters,scope=Namespaced,categories=cluster-api,shortName=azc
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Location",type="string",JSONPath=".spec.location"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host",priority=1

// AzureCluster is the Azure infrastructure of a Cluster API Cluster.
type AzureCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AzureClusterSpec   `json:"spec,omitempty"`
	Status AzureClusterStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AzureClusterList is a list of AzureClusters.
type AzureClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureCluster `json:"items"`
}

// AzureClusterTemplateResource is what a ClusterClass stamps out.
type AzureClusterTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	Spec       AzureClusterSpec     `json:"spec"`
}

// AzureClusterTemplateSpec holds the template.
type AzureClusterTemplateSpec struct {
	Template AzureClusterTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azureclustertemplates,scope=Namespaced,categories=cluster-api,shortName=azct
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"

// AzureClusterTemplate is a template of AzureClusters for ClusterClasses.
type AzureClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AzureClusterTemplateSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// AzureClusterTemplateList is a list of AzureClusterTemplates.
type AzureClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureClusterTemplate `json:"items"`
}

// GetConditions lets Cluster API's conditions utilities read the object.
func (c *AzureCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions lets Cluster API's conditions utilities write the object.
func (c *AzureCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

func init() {
	register(&AzureCluster{}, &AzureClusterList{}, &AzureClusterTemplate{}, &AzureClusterTemplateList{})
}
