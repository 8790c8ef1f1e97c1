package cloudprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Labels the cloud provider owns: a kubelet with --cloud-provider=external
// leaves them to it.
const (
	InstanceTypeLabel = "node.kubernetes.io/instance-type"
	RegionLabel       = "topology.kubernetes.io/region"
	ZoneLabel         = "topology.kubernetes.io/zone"
)

// Instance is what a VM's instance metadata tells the node manager running
// on it.
type Instance struct {
	// ProviderID is what ProviderID makes of the VM's metadata.
	ProviderID   string
	InstanceType string
	Region       string
	// Zone is <region>-<zone>, or the fault domain ("0") of a VM in no zone.
	Zone      string
	Addresses []corev1.NodeAddress
}

// Metadata is what a VM's instance metadata (IMDS compute) says of it that
// azure-cloud-node-manager builds the provider ID from.
type Metadata struct {
	SubscriptionID, ResourceGroup string
	// Name is the VM's name; for a scale-set instance, ScaleSet and
	// InstanceID (IMDS names it <scale set>_<instance ID>).
	Name, ScaleSet, InstanceID string
}

// ProviderID is the provider ID the node manager writes on the node of the
// VM it runs on, composed from its instance metadata with the subscription
// and resource group in lower case, whatever case ARM keeps them in
// (cloud-provider-azure pkg/provider/azure_instances.go
// getLocalInstanceProviderID, and azure_standard.go getStandardMachineID /
// azure_vmss.go getVmssMachineID for the two templates). The node name,
// which a standalone VM's ID is composed from, is its lower-case host name.
func ProviderID(md Metadata) string {
	sub, rg := strings.ToLower(md.SubscriptionID), strings.ToLower(md.ResourceGroup)
	if md.ScaleSet != "" {
		return fmt.Sprintf("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachineScaleSets/%s/virtualMachines/%s", sub, rg, md.ScaleSet, md.InstanceID)
	}
	return fmt.Sprintf("azure:///subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/virtualMachines/%s", sub, rg, strings.ToLower(md.Name))
}

// InitializeNode is what azure-cloud-node-manager does for the node it runs
// on: it sets the provider ID, the cloud's labels and the addresses, then
// removes the uninitialized taint, so that pods schedule. Idempotent.
func InitializeNode(ctx context.Context, client kubernetes.Interface, name string, in Instance) error {
	// The last attempt's error: RetryOnConflict answers nil for one that
	// wraps a cancelled context, which would report a node initialized.
	var err error
	_ = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		err = initializeNode(ctx, client, name, in)
		return err
	})
	return err
}

func initializeNode(ctx context.Context, client kubernetes.Interface, name string, in Instance) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Spec.ProviderID != "" && n.Spec.ProviderID != in.ProviderID {
		return fmt.Errorf("node %s has provider ID %s, but the instance metadata says %s", name, n.Spec.ProviderID, in.ProviderID)
	}
	n.Spec.ProviderID = in.ProviderID
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[InstanceTypeLabel], n.Labels[RegionLabel], n.Labels[ZoneLabel] = in.InstanceType, in.Region, in.Zone
	n.Labels["beta.kubernetes.io/instance-type"] = in.InstanceType
	var kept []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != UninitializedTaint {
			kept = append(kept, t)
		}
	}
	n.Spec.Taints = kept
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if len(in.Addresses) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": in.Addresses}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
