package webhooks

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/api/equality"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/providerid"
	"github.com/winkube/winkube/internal/naming"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-winkube-dev-v1alpha1-azuremachinepool,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachinepools,versions=v1alpha1,name=default.azuremachinepool.infrastructure.winkube.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azuremachinepool,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachinepools,versions=v1alpha1,name=validation.azuremachinepool.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureMachinePool defaults and validates scale-set pools, including the
// Windows computer-name prefix and conflicts between a cluster's pools.
type AzureMachinePool struct {
	Reader client.Reader
	// Records guards the controllers' records (records.go).
	Records *Records
}

// Default fills the VM model like a machine's (an SSH key for Linux, kept
// across updates) and the rolling-update strategy.
func (w *AzureMachinePool) Default(ctx context.Context, mp *infrav1.AzureMachinePool) error {
	if mp.Spec.Template.SSHPublicKey == "" {
		if req, err := admission.RequestFromContext(ctx); err == nil && len(req.OldObject.Raw) > 0 {
			old := &infrav1.AzureMachinePool{}
			if err := decodeRaw(req.OldObject.Raw, old); err == nil {
				mp.Spec.Template.SSHPublicKey = old.Spec.Template.SSHPublicKey
			}
		}
	}
	if mp.Spec.Strategy.MaxSurge == nil {
		v := intstr.FromInt32(1)
		mp.Spec.Strategy.MaxSurge = &v
	}
	if mp.Spec.Strategy.MaxUnavailable == nil {
		v := intstr.FromInt32(0)
		mp.Spec.Strategy.MaxUnavailable = &v
	}
	return defaultVMSpec(&mp.Spec.Template, true)
}

// ComputerNamePrefix is the scale set's computer-name prefix.
func ComputerNamePrefix(mp *infrav1.AzureMachinePool) string {
	if mp.Spec.Template.OS() == infrav1.Windows {
		return naming.WindowsScaleSetPrefix(mp.Name)
	}
	return mp.Name
}

func (w *AzureMachinePool) validate(ctx context.Context, mp *infrav1.AzureMachinePool) field.ErrorList {
	p := field.NewPath("spec", "template")
	errs := validateVMSpec(&mp.Spec.Template, p)
	errs = append(errs, validateTags(mp.Spec.AdditionalTags, field.NewPath("spec", "additionalTags"))...)
	name := field.NewPath("metadata", "name")
	// The scale set is named after the pool: a scale set's name has at
	// most 64 characters (resource-name-rules.md, Microsoft.Compute
	// virtualMachineScaleSets), whatever its computer-name prefix.
	if len(mp.Name) > maxScaleSetName {
		errs = append(errs, field.TooLong(name, mp.Name, maxScaleSetName))
	}
	prefix := ComputerNamePrefix(mp)
	if mp.Spec.Template.OS() == infrav1.Windows {
		if err := naming.ValidateWindowsComputerName(prefix); err != nil {
			errs = append(errs, field.Invalid(name, mp.Name, fmt.Sprintf("gives the Windows computer-name prefix %q: %v", prefix, err)))
		}
	} else if len(prefix) > naming.MaxLinuxScaleSetPrefix {
		errs = append(errs, field.Invalid(name, mp.Name, fmt.Sprintf("is %d characters; a Linux scale set's computer-name prefix may have at most %d", len(prefix), naming.MaxLinuxScaleSetPrefix)))
	}
	for _, s := range []struct {
		name string
		v    *intstr.IntOrString
	}{{"maxSurge", mp.Spec.Strategy.MaxSurge}, {"maxUnavailable", mp.Spec.Strategy.MaxUnavailable}} {
		if s.v != nil {
			if n, err := intstr.GetScaledValueFromIntOrPercent(s.v, 100, true); err != nil || n < 0 {
				errs = append(errs, field.Invalid(field.NewPath("spec", "strategy", s.name), s.v.String(), "must be a non-negative number or a percentage such as 25%"))
			}
		}
	}
	if s := mp.Spec.Strategy; s.MaxSurge != nil && s.MaxUnavailable != nil && s.MaxSurge.IntValue() == 0 && s.MaxUnavailable.IntValue() == 0 && s.MaxSurge.Type == intstr.Int && s.MaxUnavailable.Type == intstr.Int {
		errs = append(errs, field.Invalid(field.NewPath("spec", "strategy"), "maxSurge 0, maxUnavailable 0", "a rollout could never replace an instance: allow a surge or an unavailable instance"))
	}
	errs = append(errs, validateCombination(&mp.Spec.Template, ownerVersion(ctx, w.Reader, mp), p)...)
	if len(errs) == 0 && mp.Spec.Template.OS() == infrav1.Windows {
		if err := nameConflict(ctx, w.Reader, &infrav1.AzureMachinePoolList{}, mp, prefix, func(o client.Object) string {
			return ComputerNamePrefix(o.(*infrav1.AzureMachinePool))
		}, true); err != nil {
			errs = append(errs, field.Invalid(name, mp.Name, err.Error()))
		}
	}
	return errs
}

// ValidateCreate checks a new pool.
func (w *AzureMachinePool) ValidateCreate(ctx context.Context, mp *infrav1.AzureMachinePool) (admission.Warnings, error) {
	return nil, invalid(mp, w.validate(ctx, mp))
}

// ValidateUpdate allows model changes (they roll the instances) but not a
// change of operating system or SSH key, nor of the Windows release while
// the pool has instances.
func (w *AzureMachinePool) ValidateUpdate(ctx context.Context, oldMP, mp *infrav1.AzureMachinePool) (admission.Warnings, error) {
	errs := w.validate(ctx, mp)
	p := field.NewPath("spec", "template")
	if oldMP.Spec.Template.OS() != mp.Spec.Template.OS() {
		errs = append(errs, field.Forbidden(p.Child("osDisk", "osType"), "a scale set cannot change its operating system: create a new pool"))
	}
	if o, n := windowsRelease(&oldMP.Spec.Template), windowsRelease(&mp.Spec.Template); inUse(oldMP) && o != "" && n != "" && o != n {
		errs = append(errs, field.Forbidden(p.Child("windowsServerVersion"), windowsReleaseChange(&oldMP.Spec.Template, &mp.Spec.Template, "pool")))
	}
	if inUse(oldMP) {
		// The scale set's model would change and its instances would not:
		// Azure applies a new NIC configuration or identity only to
		// instances made after it (the model is Manual-upgrade), winkube
		// replaces instances only for what they report (size, image, OS
		// disk, zone), and CAPZ never sends the network profile to an
		// existing scale set (azure/services/scalesets/spec.go
		// existingParameters, CAPZ 69ec3a40).
		const newPool = "would change the scale set's model and not its instances: create a new pool beside this one and scale this one to 0"
		o, n := &oldMP.Spec.Template, &mp.Spec.Template
		if !equality.Semantic.DeepEqual(o.AcceleratedNetworking, n.AcceleratedNetworking) {
			errs = append(errs, field.Forbidden(p.Child("acceleratedNetworking"), "a change on a pool in use "+newPool))
		}
		if o.Identity != n.Identity || !equality.Semantic.DeepEqual(o.UserAssignedIdentities, n.UserAssignedIdentities) {
			errs = append(errs, field.Forbidden(p.Child("identity"), "a change of identity or userAssignedIdentities on a pool in use "+newPool))
		}
	}
	if oldMP.Spec.Template.SSHPublicKey != mp.Spec.Template.SSHPublicKey {
		errs = append(errs, field.Forbidden(p.Child("sshPublicKey"), "cannot change on an existing scale set"))
	}
	errs = append(errs, w.Records.check(ctx, oldMP, mp)...)
	return nil, invalid(mp, errs)
}

// ValidateDelete allows deletion.
func (w *AzureMachinePool) ValidateDelete(context.Context, *infrav1.AzureMachinePool) (admission.Warnings, error) {
	return nil, nil
}

// +kubebuilder:webhook:verbs=update,path=/validate-infrastructure-winkube-dev-v1alpha1-azuremachinepoolmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachinepoolmachines,versions=v1alpha1,name=validation.azuremachinepoolmachine.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureMachinePoolMachine keeps an instance's identity fixed.
type AzureMachinePoolMachine struct {
	// Records guards the controllers' records (records.go).
	Records *Records
}

// ValidateCreate allows creation (the pool controller creates them).
func (AzureMachinePoolMachine) ValidateCreate(context.Context, *infrav1.AzureMachinePoolMachine) (admission.Warnings, error) {
	return nil, nil
}

// ValidateUpdate refuses a change of the instance it stands for.
func (w AzureMachinePoolMachine) ValidateUpdate(ctx context.Context, oldM, m *infrav1.AzureMachinePoolMachine) (admission.Warnings, error) {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if providerIDChanged(oldM.Spec.ProviderID, m.Spec.ProviderID) {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "cannot change once set: it names the scale-set instance"))
	}
	if oldM.Spec.InstanceID != "" && oldM.Spec.InstanceID != m.Spec.InstanceID {
		errs = append(errs, field.Forbidden(p.Child("instanceID"), "cannot change once set"))
	}
	errs = append(errs, w.Records.check(ctx, oldM, m)...)
	return nil, invalid(m, errs)
}

// ValidateDelete allows deletion.
func (AzureMachinePoolMachine) ValidateDelete(context.Context, *infrav1.AzureMachinePoolMachine) (admission.Warnings, error) {
	return nil, nil
}

// providerIDChanged says whether a set provider ID would name something
// else. Rewriting one as cloud-provider-azure writes it (the resource group
// in lower case; package providerid) names the same VM: the controllers
// do that to provider IDs they wrote before, so that Cluster API finds
// their nodes.
func providerIDChanged(old, cur string) bool {
	return old != "" && old != cur && cur != providerid.Normalize(old)
}

// inUse reports whether a pool has instances (or had, as far as its status
// and provider IDs say).
func inUse(mp *infrav1.AzureMachinePool) bool {
	return mp.Status.Replicas > 0 || len(mp.Spec.ProviderIDList) > 0
}

// windowsRelease is a Windows VM spec's release, the default (2022) when
// unset; "" for Linux.
func windowsRelease(s *infrav1.AzureVMSpec) infrav1.WindowsServerVersion {
	if s.OS() != infrav1.Windows {
		return ""
	}
	if s.WindowsServerVersion == "" {
		return infrav1.WindowsServer2022
	}
	return s.WindowsServerVersion
}

// windowsReleaseChange says why a Windows release cannot change in place
// and how to move instead.
func windowsReleaseChange(oldS, newS *infrav1.AzureVMSpec, what string) string {
	return fmt.Sprintf("cannot change from %q to %q on a %s in use: no platform upgrades a Windows node's OS in place, and process-isolated containers run only on a host of their own build, so every workload built for Windows Server %s would break as its nodes are replaced. "+
		"Create a new pool beside this one instead ('winkube plan windows-upgrade --to %s' names what breaks and writes the new AzureMachineTemplate and MachineDeployment, or AzureMachinePool and MachinePool), move the workloads, then scale this one to 0",
		windowsRelease(oldS), windowsRelease(newS), what, windowsRelease(oldS), windowsRelease(newS))
}
