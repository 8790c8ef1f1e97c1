package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/naming"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-winkube-dev-v1alpha1-azuremachine,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachines,versions=v1alpha1,name=default.azuremachine.infrastructure.winkube.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azuremachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachines,versions=v1alpha1,name=validation.azuremachine.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureMachine defaults and validates AzureMachines, including the Windows
// name rules and conflicts with the cluster's other machines.
type AzureMachine struct {
	Reader client.Reader
	// Records guards the controllers' records (records.go).
	Records *Records
	// Machines, when set, is a cache of AzureMachines indexed by
	// VMNameIndex. The name check on create then reads only the machines
	// that claim the same VM name; listing the cluster's machines for
	// every new one costs the square of the machine count as a
	// MachineDeployment grows. A machine created a moment ago may not be
	// in the cache yet: the check is the early, clear refusal, and the
	// controller still refuses to take over a VM that belongs to another
	// machine (VMNameConflict).
	Machines client.Reader
}

// VMNameIndex indexes AzureMachines by their VM name, lower-cased as Azure
// compares names.
const VMNameIndex = "winkube.dev/vm-name"

// IndexVMName is VMNameIndex's function.
func IndexVMName(o client.Object) []string {
	return []string{strings.ToLower(VMName(o.(*infrav1.AzureMachine)))}
}

// Default fills in the OS disk, runtime, Windows release and, for Linux, an
// SSH key. On an update that drops the key, the existing key is kept: the
// key is immutable, and a new random one would make the update fail.
func (w *AzureMachine) Default(ctx context.Context, m *infrav1.AzureMachine) error {
	if m.Spec.SSHPublicKey == "" {
		if req, err := admission.RequestFromContext(ctx); err == nil && len(req.OldObject.Raw) > 0 {
			old := &infrav1.AzureMachine{}
			if err := decodeRaw(req.OldObject.Raw, old); err == nil {
				m.Spec.SSHPublicKey = old.Spec.SSHPublicKey
			}
		}
	}
	return defaultVMSpec(&m.Spec.AzureVMSpec, true)
}

// VMName is the Azure VM (and computer) name of a machine.
func VMName(m *infrav1.AzureMachine) string {
	return naming.VMName(m.Name, m.Spec.OS() == infrav1.Windows)
}

// validate checks a machine; checkNames also looks for other machines of
// its cluster claiming its VM name, which lists them all; checkVersion
// also reads the owning Machine for its Kubernetes version, which the OS
// and runtime must suit.
func (w *AzureMachine) validate(ctx context.Context, m *infrav1.AzureMachine, checkNames, checkVersion bool) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateVMSpec(&m.Spec.AzureVMSpec, p)
	errs = append(errs, validateTags(m.Spec.AdditionalTags, p.Child("additionalTags"))...)
	name := field.NewPath("metadata", "name")
	vmName := VMName(m)
	if m.Spec.OS() == infrav1.Windows {
		if err := naming.ValidateWindowsComputerName(vmName); err != nil {
			errs = append(errs, field.Invalid(name, m.Name, fmt.Sprintf("gives the Windows computer name %q: %v", vmName, err)))
		}
	} else if _, err := naming.LinuxName(m.Name); err != nil {
		errs = append(errs, field.Invalid(name, m.Name, err.Error()))
	}
	if checkVersion {
		errs = append(errs, validateCombination(&m.Spec.AzureVMSpec, ownerVersion(ctx, w.Reader, m), p)...)
	}
	if len(errs) == 0 && checkNames {
		// Another machine of the cluster with the same VM name would be
		// the same VM to Azure.
		nameOf := func(o client.Object) string { return VMName(o.(*infrav1.AzureMachine)) }
		var err error
		var conflict *naming.ConflictError
		if w.Machines != nil {
			err = nameConflict(ctx, w.Machines, &infrav1.AzureMachineList{}, m, vmName, nameOf, false, client.MatchingFields{VMNameIndex: strings.ToLower(vmName)})
		}
		if w.Machines == nil || (err != nil && !errors.As(err, &conflict)) {
			// No cache, or one that does not hold this namespace (a
			// manager started with --watch-namespace still admits
			// every namespace's machines).
			err = nameConflict(ctx, w.Reader, &infrav1.AzureMachineList{}, m, vmName, nameOf, false)
		}
		if err != nil {
			errs = append(errs, field.Invalid(name, m.Name, err.Error()))
		}
	}
	return errs
}

// ValidateCreate checks a new machine.
func (w *AzureMachine) ValidateCreate(ctx context.Context, m *infrav1.AzureMachine) (admission.Warnings, error) {
	return nil, invalid(m, w.validate(ctx, m, true, true))
}

// ValidateUpdate also refuses changes to what the VM cannot change.
func (w *AzureMachine) ValidateUpdate(ctx context.Context, oldM, m *infrav1.AzureMachine) (admission.Warnings, error) {
	// The VM name was checked when the machine was created, and every
	// machine created since was checked against it: only a new name or a
	// move to another cluster can make a conflict. Checking on every update
	// would list the cluster's machines for each status or finalizer
	// change, a cost that grows with the square of the machine count.
	recheck := VMName(oldM) != VMName(m) || oldM.Labels[clusterv1.ClusterNameLabel] != m.Labels[clusterv1.ClusterNameLabel]
	// The OS and runtime suit the Machine's version unless one of them
	// changed: the spec, or the owner (Cluster API adds the Machine as
	// owner after creating the machine, and that update is checked). The
	// controllers' and Cluster API's writes of finalizers, labels and
	// records, a dozen per machine while it comes up, read no Machine.
	versionCheck := !semanticEqual(oldM.Spec, m.Spec) || !semanticEqual(oldM.OwnerReferences, m.OwnerReferences)
	errs := w.validate(ctx, m, recheck, versionCheck)
	p := field.NewPath("spec")
	errs = append(errs, immutableVMFields(&oldM.Spec.AzureVMSpec, &m.Spec.AzureVMSpec, p)...)
	if providerIDChanged(oldM.Spec.ProviderID, m.Spec.ProviderID) {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "cannot change once set: it names the machine's VM"))
	}
	errs = append(errs, w.Records.check(ctx, oldM, m)...)
	return nil, invalid(m, errs)
}

// ValidateDelete allows deletion.
func (w *AzureMachine) ValidateDelete(context.Context, *infrav1.AzureMachine) (admission.Warnings, error) {
	return nil, nil
}

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-winkube-dev-v1alpha1-azuremachinetemplate,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachinetemplates,versions=v1alpha1,name=default.azuremachinetemplate.infrastructure.winkube.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azuremachinetemplate,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azuremachinetemplates,versions=v1alpha1,name=validation.azuremachinetemplate.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureMachineTemplate defaults and validates templates, whose spec is
// immutable: a MachineDeployment rolls by pointing at a new template.
type AzureMachineTemplate struct{}

// Default fills in the same defaults as a machine, but no SSH key: each
// machine gets its own.
func (AzureMachineTemplate) Default(_ context.Context, t *infrav1.AzureMachineTemplate) error {
	return defaultVMSpec(&t.Spec.Template.Spec.AzureVMSpec, false)
}

func (AzureMachineTemplate) validate(t *infrav1.AzureMachineTemplate) field.ErrorList {
	p := field.NewPath("spec", "template", "spec")
	errs := validateVMSpec(&t.Spec.Template.Spec.AzureVMSpec, p)
	errs = append(errs, validateTags(t.Spec.Template.Spec.AdditionalTags, p.Child("additionalTags"))...)
	if t.Spec.Template.Spec.ProviderID != "" {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "a template cannot name a VM: leave providerID out"))
	}
	return errs
}

// ValidateCreate checks a new template.
func (w AzureMachineTemplate) ValidateCreate(_ context.Context, t *infrav1.AzureMachineTemplate) (admission.Warnings, error) {
	return nil, invalid(t, w.validate(t))
}

// ValidateUpdate refuses any change of the spec.
func (w AzureMachineTemplate) ValidateUpdate(ctx context.Context, oldT, t *infrav1.AzureMachineTemplate) (admission.Warnings, error) {
	errs := w.validate(t)
	oldS, newS := &oldT.Spec.Template.Spec.AzureVMSpec, &t.Spec.Template.Spec.AzureVMSpec
	switch {
	case isTopologyDryRun(ctx, t) || semanticEqual(oldT.Spec, t.Spec):
	case windowsRelease(oldS) != "" && windowsRelease(newS) != "" && windowsRelease(oldS) != windowsRelease(newS):
		errs = append(errs, field.Forbidden(field.NewPath("spec", "template", "spec", "windowsServerVersion"), windowsReleaseChange(oldS, newS, "template")))
	default:
		errs = append(errs, field.Forbidden(field.NewPath("spec"),
			"AzureMachineTemplate is immutable: create a new template and point the MachineDeployment or KubeadmControlPlane at it"))
	}
	return nil, invalid(t, errs)
}

// ValidateDelete allows deletion.
func (AzureMachineTemplate) ValidateDelete(context.Context, *infrav1.AzureMachineTemplate) (admission.Warnings, error) {
	return nil, nil
}
