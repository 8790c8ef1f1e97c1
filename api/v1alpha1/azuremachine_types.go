package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// MachineFinalizer keeps an AzureMachine until its VM, disk, NIC and NAT
	// rule are gone.
	MachineFinalizer = "azuremachine.infrastructure.winkube.dev"
)

// AzureMachineSpec is the desired VM of one Cluster API Machine.
type AzureMachineSpec struct {
	// providerID is azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name>,
	// set by winkube once the VM exists.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID  string `json:"providerID,omitempty"`
	AzureVMSpec `json:",inline"`
	// additionalTags are added to the VM, its disk and NIC.
	// +optional
	AdditionalTags map[string]string `json:"additionalTags,omitempty"`
}

// AzureMachineInitializationStatus is the Cluster API contract's
// initialization report.
// +kubebuilder:validation:MinProperties=1
type AzureMachineInitializationStatus struct {
	// provisioned is true when the VM exists and is running.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// AzureMachineStatus is the observed state of the VM.
type AzureMachineStatus struct {
	// +optional
	Initialization AzureMachineInitializationStatus `json:"initialization,omitempty,omitzero"`
	// addresses of the VM: its hostname, private and public IPs.
	// +optional
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`
	// failureDomain is the zone the VM was placed in.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`
	// vmName is the Azure name of the VM, which for Windows can differ from
	// the object's name (15-character rule).
	// +optional
	VMName string `json:"vmName,omitempty"`
	// sshNATPort is the frontend port of the API-server load balancer's
	// inbound NAT rule to this VM's port 22. Only control-plane VMs have
	// one: they are the jump hosts to the other nodes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	SSHNATPort int32 `json:"sshNATPort,omitempty"`
	// vmState is the VM's provisioning state in Azure.
	// +optional
	VMState string `json:"vmState,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// createdResources are the ARM IDs of the VM, its OS disk, NIC and SSH
	// NAT rule, each recorded before it is created. Deletion removes exactly
	// these, and needs neither the Cluster nor the AzureCluster to find them.
	// +optional
	// +listType=set
	CreatedResources []string `json:"createdResources,omitempty"`
	// +optional
	LongRunningOperationStates Futures `json:"longRunningOperationStates,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azuremachines,scope=Namespaced,categories=cluster-api,shortName=azm
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
// +kubebuilder:printcolumn:name="OS",type="string",JSONPath=".spec.osDisk.osType"
// +kubebuilder:printcolumn:name="VM",type="string",JSONPath=".status.vmName"
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.vmState"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"

// AzureMachine is the Azure VM of a Cluster API Machine.
type AzureMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AzureMachineSpec   `json:"spec,omitempty"`
	Status AzureMachineStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AzureMachineList is a list of AzureMachines.
type AzureMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureMachine `json:"items"`
}

// AzureMachineTemplateResource is what a MachineDeployment or
// KubeadmControlPlane stamps out for each Machine.
type AzureMachineTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	Spec       AzureMachineSpec     `json:"spec"`
}

// AzureMachineTemplateSpec holds the template.
type AzureMachineTemplateSpec struct {
	Template AzureMachineTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=azuremachinetemplates,scope=Namespaced,categories=cluster-api,shortName=azmt
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"

// AzureMachineTemplate is an immutable template of AzureMachines; roll a
// MachineDeployment by pointing it at a new template.
type AzureMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AzureMachineTemplateSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// AzureMachineTemplateList is a list of AzureMachineTemplates.
type AzureMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AzureMachineTemplate `json:"items"`
}

// GetConditions lets Cluster API's conditions utilities read the object.
func (m *AzureMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions lets Cluster API's conditions utilities write the object.
func (m *AzureMachine) SetConditions(conds []metav1.Condition) { m.Status.Conditions = conds }

// OS is the machine's operating system, Linux unless the OS disk says Windows.
func (s *AzureVMSpec) OS() OSType {
	if s.OSDisk.OSType == Windows {
		return Windows
	}
	return Linux
}

func init() {
	register(&AzureMachine{}, &AzureMachineList{}, &AzureMachineTemplate{}, &AzureMachineTemplateList{})
}
