package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// MachinePoolFinalizer keeps an AzureMachinePool until its scale set is gone.
	MachinePoolFinalizer = "azuremachinepool.infrastructure.winkube.dev"
	// MachinePoolMachineFinalizer keeps an AzureMachinePoolMachine until its
	// scale-set instance is gone.
	MachinePoolMachineFinalizer = "azuremachinepoolmachine.infrastructure.winkube.dev"
	// MachinePoolNameLabel marks the AzureMachinePoolMachines of a pool.
	MachinePoolNameLabel = "infrastructure.winkube.dev/machine-pool"
)

// RollingUpdateStrategy bounds how many instances a model change replaces at once.
type RollingUpdateStrategy struct {
	// maxSurge is how many instances may be created above the desired count.
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// maxUnavailable is how many instances may be missing from the desired count.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// AzureMachinePoolSpec is the desired scale set of a Cluster API MachinePool.
type AzureMachinePoolSpec struct {
	// providerID identifies the scale set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`
	// providerIDList are the instances' provider IDs, kept up to date for Cluster API.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	ProviderIDList []string `json:"providerIDList,omitempty"`
	// template is the VM model of every instance.
	Template AzureVMSpec `json:"template"`
	// strategy of rolling out a changed model; defaulted to maxSurge 1,
	// maxUnavailable 0.
	// +optional
	Strategy RollingUpdateStrategy `json:"strategy,omitempty"`
	// additionalTags are added to the scale set and its instances.
	// +optional
	AdditionalTags map[string]string `json:"additionalTags,omitempty"`
}

// AzureMachinePoolInitializationStatus is the Cluster API contract's
// initialization report.
// +kubebuilder:validation:MinProperties=1
type AzureMachinePoolInitializationStatus struct {
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// AzureMachinePoolStatus is the observed state of the scale set.
type AzureMachinePoolStatus struct {
	// +optional
	Initialization AzureMachinePoolInitializationStatus `json:"initialization,omitempty,omitzero"`
	// ready is initialization.provisioned in the deprecated v1beta1
	// contract's field. Cluster API v1.14.2's MachinePool controller still
	// reads only this one (core/reconcilers/machinepool,
	// reconcileInfrastructure, through controllers/external IsReady),
	// although its contract page names initialization.provisioned; without
	// it a pool never gets its nodes. Kept until Cluster API drops the
	// v1beta1 contract (announced for April 2027).
	// +optional
	Ready bool `json:"ready,omitempty"`
	// replicas is the number of instances last observed.
	// +optional
	Replicas int32 `json:"replicas"`
	// infrastructureMachineKind opts in to MachinePool Machines: every
	// instance is an AzureMachinePoolMachine that Cluster API tracks as a Machine.
	// +optional
	InfrastructureMachineKind string `json:"infrastructureMachineKind,omitempty"`
	// computerNamePrefix is the scale set's Windows or Linux name prefix.
	// +optional
	ComputerNamePrefix string `json:"computerNamePrefix,omitempty"`
	// image is the default image the pool resolved when spec.template.image
	// is unset, kept so that a newer build of it in the marketplace does
	// not roll the pool: it is resolved again only when the Kubernetes
	// version, OS or Windows Server version asks for another image. CAPZ
	// records the pool's image in the same field (azure/scope/machinepool.go
	// SaveVMImageToStatus @69ec3a40).
	// +optional
	Image *Image `json:"image,omitempty"`
	// createdResources are the ARM IDs of what the pool created (its scale
	// set), recorded before creation; deletion removes exactly these.
	// +optional
	// +listType=set
	CreatedResources []string `json:"createdResources,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	LongRunningOperationStates Futures `json:"longRunningOperationStates,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azuremachinepools,scope=Namespaced,categories=cluster-api,shortName=amp
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
// +kubebuilder:printcolumn:name="OS",type="string",JSONPath=".spec.template.osDisk.osType"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Prefix",type="string",JSONPath=".status.computerNamePrefix"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"

// AzureMachinePool is the virtual machine scale set of a Cluster API MachinePool.
type AzureMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AzureMachinePoolSpec   `json:"spec,omitempty"`
	Status AzureMachinePoolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AzureMachinePoolList is a list of AzureMachinePools.
type AzureMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureMachinePool `json:"items"`
}

// AzureMachinePoolMachineSpec is one instance of a scale set.
type AzureMachinePoolMachineSpec struct {
	// providerID of the instance.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`
	// instanceID is the scale set's ID of the instance.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`
}

// AzureMachinePoolMachineInitializationStatus is the Cluster API contract's
// initialization report.
// +kubebuilder:validation:MinProperties=1
type AzureMachinePoolMachineInitializationStatus struct {
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// AzureMachinePoolMachineStatus is the observed state of the instance.
type AzureMachinePoolMachineStatus struct {
	// +optional
	Initialization AzureMachinePoolMachineInitializationStatus `json:"initialization,omitempty,omitzero"`
	// computerName of the instance, as its node is named.
	// +optional
	ComputerName string `json:"computerName,omitempty"`
	// +optional
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`
	// provisioningState of the instance in Azure.
	// +optional
	ProvisioningState string `json:"provisioningState,omitempty"`
	// latestModelApplied is false while the instance runs an older model
	// than the scale set's.
	// +optional
	LatestModelApplied bool `json:"latestModelApplied"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	LongRunningOperationStates Futures `json:"longRunningOperationStates,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azuremachinepoolmachines,scope=Namespaced,categories=cluster-api,shortName=ampm
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Computer",type="string",JSONPath=".status.computerName"
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.provisioningState"
// +kubebuilder:printcolumn:name="Latest",type="boolean",JSONPath=".status.latestModelApplied"

// AzureMachinePoolMachine is one scale-set instance, so that Cluster API can
// drain, health-check and delete it as a Machine.
type AzureMachinePoolMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AzureMachinePoolMachineSpec   `json:"spec,omitempty"`
	Status AzureMachinePoolMachineStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AzureMachinePoolMachineList is a list of AzureMachinePoolMachines.
type AzureMachinePoolMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureMachinePoolMachine `json:"items"`
}

// GetConditions lets Cluster API's conditions utilities read the object.
func (p *AzureMachinePool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions lets Cluster API's conditions utilities write the object.
func (p *AzureMachinePool) SetConditions(conds []metav1.Condition) { p.Status.Conditions = conds }

// GetConditions lets Cluster API's conditions utilities read the object.
func (m *AzureMachinePoolMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions lets Cluster API's conditions utilities write the object.
func (m *AzureMachinePoolMachine) SetConditions(conds []metav1.Condition) {
	m.Status.Conditions = conds
}

func init() {
	register(&AzureMachinePool{}, &AzureMachinePoolList{}, &AzureMachinePoolMachine{}, &AzureMachinePoolMachineList{})
}
