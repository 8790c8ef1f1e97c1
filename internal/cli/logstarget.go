package cli

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/machinelogs"
	"github.com/winkube/winkube/internal/naming"
	"github.com/winkube/winkube/internal/nodelogs"
)

// azureMachine is a machine as Azure knows it, found from the management
// cluster for Run Command: it needs no address and no node, so a machine
// that never joined is found by its Machine or AzureMachine name.
type azureMachine struct {
	info    nodelogs.Machine
	target  machinelogs.Target
	cluster *infrav1.AzureCluster
}

// unknownMachineError: nothing of that name.
type unknownMachineError struct{ msg string }

func (e unknownMachineError) Error() string { return e.msg }

// managementError: the management cluster could not be read, for SSH as
// for Run Command.
type managementError struct{ error }

func (e managementError) Unwrap() error { return e.error }

// findAzureMachine finds what name means in namespace: a Machine, an
// AzureMachine or AzureMachinePoolMachine, a Node (the Machine's nodeRef),
// or a VM or computer name; then its scale set or VM and its AzureCluster.
func findAzureMachine(ctx context.Context, c client.Client, ns, name, cluster string) (*azureMachine, error) {
	obj, err := infraObject(ctx, c, ns, name, cluster)
	if err != nil {
		return nil, err
	}
	if got := obj.GetLabels()[clusterv1.ClusterNameLabel]; cluster != "" && got != cluster {
		return nil, fmt.Errorf("%q is a machine of cluster %s, not of %s: drop --cluster or name another machine", name, got, cluster)
	}
	m := &azureMachine{info: nodelogs.Machine{Name: name, Namespace: ns, Cluster: obj.GetLabels()[clusterv1.ClusterNameLabel]}}
	switch o := obj.(type) {
	case *infrav1.AzureMachine:
		windows := o.Spec.OS() == infrav1.Windows
		vm := o.Status.VMName
		if vm == "" {
			vm = naming.VMName(o.Name, windows)
		}
		m.info.Object, m.info.Hostname = "AzureMachine/"+o.Name, vm
		m.target = machinelogs.Target{VM: vm, Windows: windows}
		m.info.Address = address(o.Status.Addresses)
	case *infrav1.AzureMachinePoolMachine:
		pool := &infrav1.AzureMachinePool{}
		poolName := o.Labels[infrav1.MachinePoolNameLabel]
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: poolName}, pool); err != nil {
			return nil, fmt.Errorf("AzureMachinePool %q of AzureMachinePoolMachine %s: %w", poolName, o.Name, err)
		}
		if o.Spec.InstanceID == "" {
			return nil, fmt.Errorf("AzureMachinePoolMachine %s has no instance ID yet: its scale-set instance is still being created", o.Name)
		}
		m.info.Object, m.info.Hostname, m.info.Address = "AzureMachinePoolMachine/"+o.Name, o.Status.ComputerName, address(o.Status.Addresses)
		m.target = machinelogs.Target{ScaleSet: pool.Name, InstanceID: o.Spec.InstanceID, Windows: pool.Spec.Template.OS() == infrav1.Windows}
	}
	m.info.OS = string(infrav1.Linux)
	if m.target.Windows {
		m.info.OS = string(infrav1.Windows)
	}
	if m.cluster, err = azureClusterOf(ctx, c, ns, m.info.Cluster); err != nil {
		return nil, err
	}
	m.target.ResourceGroup = m.cluster.Spec.ResourceGroup
	m.info.Azure = fmt.Sprintf("%s in resource group %s of subscription %s", m.target, m.target.ResourceGroup, m.cluster.Spec.SubscriptionID)
	return m, nil
}

// infraObject is the AzureMachine or AzureMachinePoolMachine name means:
// object names first, then nodes, VM and computer names.
func infraObject(ctx context.Context, c client.Client, ns, name, cluster string) (client.Object, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	machine := &clusterv1.Machine{}
	err := c.Get(ctx, key, machine)
	if err == nil {
		return infraOf(ctx, c, machine)
	}
	if !apierrors.IsNotFound(err) {
		return nil, managementError{fmt.Errorf("reading the management cluster: %w", err)}
	}
	for _, obj := range []client.Object{&infrav1.AzureMachine{}, &infrav1.AzureMachinePoolMachine{}} {
		if err := c.Get(ctx, key, obj); err == nil {
			return obj, nil
		} else if !apierrors.IsNotFound(err) {
			return nil, managementError{err}
		}
	}
	var (
		machines clusterv1.MachineList
		ams      infrav1.AzureMachineList
		ampms    infrav1.AzureMachinePoolMachineList
	)
	opts := []client.ListOption{client.InNamespace(ns)}
	if cluster != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.ClusterNameLabel: cluster})
	}
	for _, l := range []client.ObjectList{&machines, &ams, &ampms} {
		if err := c.List(ctx, l, opts...); err != nil {
			return nil, managementError{err}
		}
	}
	var found []client.Object
	for i := range machines.Items {
		if machines.Items[i].Status.NodeRef.Name == name {
			obj, err := infraOf(ctx, c, &machines.Items[i])
			if err != nil {
				return nil, err
			}
			found = append(found, obj)
		}
	}
	for i := range ams.Items {
		if am := &ams.Items[i]; len(found) == 0 && strings.EqualFold(am.Status.VMName, name) {
			found = append(found, am)
		}
	}
	for i := range ampms.Items {
		if m := &ampms.Items[i]; len(found) == 0 && strings.EqualFold(m.Status.ComputerName, name) {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return nil, unknownMachineError{fmt.Sprintf("no Machine, AzureMachine, AzureMachinePoolMachine, Node, VM or computer named %q in namespace %s: 'kubectl get machines,azuremachines -n %s' lists them (a machine that never joined has no node: name its Machine or AzureMachine; -n picks the namespace)", name, ns, ns)}
	case 1:
		return found[0], nil
	}
	var what []string
	for _, o := range found {
		what = append(what, fmt.Sprintf("%s (cluster %s)", o.GetName(), o.GetLabels()[clusterv1.ClusterNameLabel]))
	}
	return nil, fmt.Errorf("%q matches %d machines: %s; name one of them, or pass --cluster", name, len(found), strings.Join(what, ", "))
}

// infraOf is a Machine's AzureMachine or AzureMachinePoolMachine.
func infraOf(ctx context.Context, c client.Client, m *clusterv1.Machine) (client.Object, error) {
	ref := m.Spec.InfrastructureRef
	var obj client.Object
	switch ref.Kind {
	case "AzureMachine":
		obj = &infrav1.AzureMachine{}
	case "AzureMachinePoolMachine":
		obj = &infrav1.AzureMachinePoolMachine{}
	default:
		return nil, fmt.Errorf("Machine %s is a %s %q, not a winkube machine: winkube reads the logs of AzureMachines and AzureMachinePoolMachines", m.Name, ref.Kind, ref.Name)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, obj); err != nil {
		return nil, fmt.Errorf("%s %s of Machine %s: %w", ref.Kind, ref.Name, m.Name, err)
	}
	return obj, nil
}

// azureClusterOf is the cluster's AzureCluster: its resource group,
// subscription, identity and cloud.
func azureClusterOf(ctx context.Context, c client.Client, ns, cluster string) (*infrav1.AzureCluster, error) {
	if cluster == "" {
		return nil, fmt.Errorf("the machine has no %s label: it belongs to no cluster", clusterv1.ClusterNameLabel)
	}
	cl := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, cl); err != nil {
		return nil, fmt.Errorf("Cluster %s: %w", cluster, err)
	}
	ac := &infrav1.AzureCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cl.Spec.InfrastructureRef.Name}, ac); err != nil {
		return nil, fmt.Errorf("AzureCluster %q of Cluster %s: %w", cl.Spec.InfrastructureRef.Name, cluster, err)
	}
	if ac.Spec.ResourceGroup == "" || ac.Spec.SubscriptionID == "" {
		return nil, fmt.Errorf("AzureCluster %s names no resource group or subscription", ac.Name)
	}
	return ac, nil
}

func address(as []clusterv1.MachineAddress) string {
	for _, a := range as {
		if a.Type == clusterv1.MachineInternalIP {
			return a.Address
		}
	}
	return ""
}
