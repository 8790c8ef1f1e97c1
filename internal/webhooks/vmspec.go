package webhooks

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/images"
)

const (
	defaultDiskSizeGB         = 128
	windowsImageDiskGB        = 127
	defaultStorageAccountType = "Premium_LRS"
)

var (
	vmSizeRE         = regexp.MustCompile(`^(Standard|Basic)_[A-Za-z0-9]+(_[A-Za-z0-9]+)*$`)
	imageVersionRE   = regexp.MustCompile(`^(latest|[0-9]+\.[0-9]+\.[0-9]+)$`)
	galleryVersionRE = regexp.MustCompile(`^(latest|[0-9]+\.[0-9]+\.[0-9]+)$`)
	armResourceIDRE  = regexp.MustCompile(`^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/(images|galleries)/.+$`)
)

// defaultVMSpec fills what a VM needs and the user left out. An SSH key is
// generated only where asked (Linux machines): a template must not get one,
// or every re-apply would change an immutable template.
func defaultVMSpec(s *infrav1.AzureVMSpec, generateSSHKey bool) error {
	if s.OSDisk.OSType == "" {
		s.OSDisk.OSType = infrav1.Linux
	}
	if s.OSDisk.DiskSizeGB == nil {
		s.OSDisk.DiskSizeGB = ptr.To[int32](defaultDiskSizeGB)
	}
	if s.OSDisk.CachingType == "" {
		s.OSDisk.CachingType = "ReadWrite"
	}
	if s.OSDisk.ManagedDisk == nil {
		s.OSDisk.ManagedDisk = &infrav1.ManagedDiskParameters{}
	}
	if s.OSDisk.ManagedDisk.StorageAccountType == "" {
		s.OSDisk.ManagedDisk.StorageAccountType = defaultStorageAccountType
		if !premiumStorageCapable(s.VMSize) {
			s.OSDisk.ManagedDisk.StorageAccountType = "StandardSSD_LRS"
		}
	}
	if s.ContainerRuntime == "" {
		s.ContainerRuntime = infrav1.Containerd
	}
	if s.OSDisk.OSType == infrav1.Windows && s.WindowsServerVersion == "" {
		s.WindowsServerVersion = infrav1.WindowsServer2022
	}
	if generateSSHKey && s.OSDisk.OSType == infrav1.Linux && s.SSHPublicKey == "" {
		key, err := newSSHPublicKey()
		if err != nil {
			return err
		}
		s.SSHPublicKey = key
	}
	return nil
}

// newSSHPublicKey makes a key whose private half is thrown away: the VM gets
// a key (Azure requires one for Linux) that nobody holds, until the user
// supplies their own.
func newSSHPublicKey() (string, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generating an SSH key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(ssh.MarshalAuthorizedKey(sshPub)), nil
}

// validateVMSpec checks the fields of a VM spec that need no other object.
func validateVMSpec(s *infrav1.AzureVMSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.VMSize == "" {
		errs = append(errs, field.Required(p.Child("vmSize"), "set an Azure VM size such as Standard_D4s_v3"))
	} else if !vmSizeRE.MatchString(s.VMSize) {
		errs = append(errs, field.Invalid(p.Child("vmSize"), s.VMSize, "an Azure VM size looks like Standard_D4s_v3 or Standard_B2ms: Standard_ or Basic_ and the size's name"))
	}
	errs = append(errs, validateImage(s.Image, p.Child("image"))...)
	// Azure refuses an OS disk smaller than its image's; the Windows
	// reference images' disk is 127 GB (Linux ones are within the 30 GB
	// minimum the API type already sets).
	if s.Image == nil && s.OSDisk.OSType == infrav1.Windows && s.OSDisk.DiskSizeGB != nil && *s.OSDisk.DiskSizeGB < windowsImageDiskGB {
		errs = append(errs, field.Invalid(p.Child("osDisk", "diskSizeGB"), *s.OSDisk.DiskSizeGB,
			fmt.Sprintf("the Windows reference images' OS disk is %d GB and Azure refuses a smaller disk: set %d or more, or leave it out", windowsImageDiskGB, windowsImageDiskGB)))
	}
	if md := s.OSDisk.ManagedDisk; md != nil {
		errs = append(errs, validateOSDiskStorage(s.VMSize, md.StorageAccountType, p.Child("osDisk", "managedDisk", "storageAccountType"))...)
	}
	if s.WindowsServerVersion != "" && s.OSDisk.OSType != infrav1.Windows {
		errs = append(errs, field.Invalid(p.Child("windowsServerVersion"), s.WindowsServerVersion,
			"applies only to Windows machines: set osDisk.osType to Windows or remove windowsServerVersion"))
	}
	if s.SSHPublicKey != "" {
		if err := validateSSHPublicKey(s.SSHPublicKey); err != nil {
			errs = append(errs, field.Invalid(p.Child("sshPublicKey"), "(key)", err.Error()))
		}
	}
	return append(errs, validateVMIdentity(s, p)...)
}

// validateVMIdentity refuses what Azure would (a UserAssigned VM with no
// identity, an identity ID that is not one, a role assignment name that is
// not a GUID) and what would be silently ignored (identities or a role for
// another kind of identity).
func validateVMIdentity(s *infrav1.AzureVMSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Identity {
	case infrav1.VMIdentityUserAssigned:
		if len(s.UserAssignedIdentities) == 0 {
			errs = append(errs, field.Required(p.Child("userAssignedIdentities"), "identity UserAssigned needs at least one identity: the first is the one the cloud provider authenticates as"))
		}
	default:
		if len(s.UserAssignedIdentities) > 0 {
			errs = append(errs, field.Forbidden(p.Child("userAssignedIdentities"), "set identity: UserAssigned to attach these identities"))
		}
	}
	for i, id := range s.UserAssignedIdentities {
		if !userAssignedIdentityRE.MatchString(id.ProviderID) {
			errs = append(errs, field.Invalid(p.Child("userAssignedIdentities").Index(i).Child("providerID"), id.ProviderID,
				"want /subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name> (an azure:// prefix is allowed)"))
		}
	}
	if r := s.SystemAssignedIdentityRole; r != nil {
		rp := p.Child("systemAssignedIdentityRole")
		if s.Identity != infrav1.VMIdentitySystemAssigned {
			errs = append(errs, field.Forbidden(rp, "applies to identity SystemAssigned only"))
		}
		if r.Name != "" && !guidRE.MatchString(r.Name) {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, "Azure names role assignments with a GUID"))
		}
		if d := r.DefinitionID; d != "" && !guidRE.MatchString(d) && !roleDefinitionRE.MatchString(d) {
			errs = append(errs, field.Invalid(rp.Child("definitionID"), d, "want a role definition's GUID (Contributor is b24988ac-6180-42a0-ab88-20f7382dd24c) or its ID .../providers/Microsoft.Authorization/roleDefinitions/<GUID>"))
		}
		if roleassignments.GrantsAccess(r.DefinitionID) {
			// The manager would hand a VM, which anyone with a shell on it
			// can act as, the right to grant anyone anything in the scope.
			errs = append(errs, field.Forbidden(rp.Child("definitionID"), "winkube does not grant a VM a role that may assign roles (Owner, User Access Administrator, "+
				"Role Based Access Control Administrator): choose a role without Microsoft.Authorization/roleAssignments/write, or grant it yourself to a user-assigned identity"))
		}
		if r.Scope != "" && !strings.HasPrefix(strings.ToLower(r.Scope), "/subscriptions/") {
			errs = append(errs, field.Invalid(rp.Child("scope"), r.Scope, "want an ARM ID such as /subscriptions/<id>/resourceGroups/<group>"))
		}
	}
	return errs
}

var (
	guidRE                 = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	roleDefinitionRE       = regexp.MustCompile(`(?i)^(/subscriptions/[^/]+)?/providers/Microsoft\.Authorization/roleDefinitions/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	userAssignedIdentityRE = regexp.MustCompile(`(?i)^(azure://)?/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+$`)
)

func validateImage(img *infrav1.Image, p *field.Path) field.ErrorList {
	if img == nil {
		return nil
	}
	var errs field.ErrorList
	set := 0
	if img.ID != nil {
		set++
		if !armResourceIDRE.MatchString(*img.ID) {
			errs = append(errs, field.Invalid(p.Child("id"), *img.ID,
				"must be the ARM ID of an image: /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/images/<name>"))
		}
	}
	if m := img.Marketplace; m != nil {
		set++
		if !imageVersionRE.MatchString(m.Version) {
			errs = append(errs, field.Invalid(p.Child("marketplace", "version"), m.Version,
				"a marketplace image version is three dotted numbers such as 128.12.20240717, or latest"))
		}
	}
	if g := img.ComputeGallery; g != nil {
		set++
		if !galleryVersionRE.MatchString(g.Version) {
			errs = append(errs, field.Invalid(p.Child("computeGallery", "version"), g.Version,
				"a gallery image version is three dotted numbers such as 1.36.3, or latest"))
		}
		if (g.SubscriptionID == nil) != (g.ResourceGroup == nil) {
			errs = append(errs, field.Invalid(p.Child("computeGallery"), g.Gallery,
				"set both subscriptionID and resourceGroup for a private gallery, or neither for a community gallery"))
		}
	}
	if set != 1 {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("%d image sources", set),
			"set exactly one of id, marketplace and computeGallery, or leave image out for the default image"))
	}
	return errs
}

func validateSSHPublicKey(b64 string) error {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("must be a base64-encoded OpenSSH public key (base64 -w0 ~/.ssh/id_rsa.pub): %w", err)
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey(raw); err != nil {
		return fmt.Errorf("decodes to something that is not an OpenSSH public key (\"ssh-ed25519 AAAA...\" or \"ssh-rsa AAAA...\"): %w", err)
	}
	return nil
}

// validateCombination checks the VM spec against the Kubernetes version the
// node will run, when that version is known.
func validateCombination(s *infrav1.AzureVMSpec, version string, p *field.Path) field.ErrorList {
	if version == "" {
		return nil
	}
	v, err := images.ParseVersion(version)
	if err != nil {
		return nil // Cluster API validates its own version field
	}
	if err := images.ValidateRuntime(v, s.OSDisk.OSType, s.WindowsServerVersion, s.ContainerRuntime); err != nil {
		f := "containerRuntime"
		val := any(s.ContainerRuntime)
		if ce, ok := err.(*images.CombinationError); ok && ce.Field == "windowsServerVersion" {
			f, val = ce.Field, s.WindowsServerVersion
		}
		return field.ErrorList{field.Invalid(p.Child(f), val, err.Error())}
	}
	return nil
}

// immutableVMFields refuses changes to what a running VM cannot change.
func immutableVMFields(oldS, newS *infrav1.AzureVMSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(name string, changed bool) {
		if changed {
			errs = append(errs, field.Forbidden(p.Child(name), "cannot change on an existing VM: create a new machine (or a new template) instead"))
		}
	}
	check("osDisk", !apiequality.Semantic.DeepEqual(oldS.OSDisk, newS.OSDisk))
	check("image", !apiequality.Semantic.DeepEqual(oldS.Image, newS.Image))
	check("sshPublicKey", oldS.SSHPublicKey != newS.SSHPublicKey)
	check("vmSize", oldS.VMSize != newS.VMSize)
	check("windowsServerVersion", oldS.WindowsServerVersion != newS.WindowsServerVersion)
	check("containerRuntime", oldS.ContainerRuntime != newS.ContainerRuntime)
	// Azure would take a new identity on the VM, but winkube sends a VM
	// once: an edit here would be silently ignored.
	check("identity", oldS.Identity != newS.Identity)
	check("userAssignedIdentities", !apiequality.Semantic.DeepEqual(oldS.UserAssignedIdentities, newS.UserAssignedIdentities))
	check("systemAssignedIdentityRole", !apiequality.Semantic.DeepEqual(oldS.SystemAssignedIdentityRole, newS.SystemAssignedIdentityRole))
	return errs
}

// vmSizeNameRE splits a size's name as Azure's VM naming conventions do
// (virtual-machines/vm-naming-conventions.md): family, vCPUs, an optional
// constrained-vCPU count, additive features in lower case, then the
// accelerator and version parts.
var vmSizeNameRE = regexp.MustCompile(`^(?:Standard|Basic)_([A-Z]+)([0-9]+)(?:-[0-9]+)?([a-z]*)(?:_.*)?$`)

// premiumStorageCapable says whether a size can take Premium SSD disks:
// the naming conventions mark it with the additive feature "s" ("Premium
// Storage capable"), older series with an S in the family (DS, GS). A name
// the rule cannot read is given the benefit of the doubt.
func premiumStorageCapable(size string) bool {
	m := vmSizeNameRE.FindStringSubmatch(size)
	if m == nil {
		return true
	}
	return strings.Contains(m[3], "s") || (len(m[1]) > 1 && strings.HasSuffix(m[1], "S"))
}

// validateOSDiskStorage refuses OS-disk storage types Azure refuses:
// Ultra Disks and Premium SSD v2 "can only be used as data disks"
// (virtual-machines/disks-types.md), and Premium SSD needs a size that
// supports it ("Requested operation cannot be performed because the VM
// size ... does not support the storage account type Premium_LRS", 400
// InvalidParameter).
func validateOSDiskStorage(size, storage string, p *field.Path) field.ErrorList {
	switch storage {
	case "UltraSSD_LRS", "PremiumV2_LRS":
		return field.ErrorList{field.Invalid(p, storage, "Azure takes Ultra Disks and Premium SSD v2 as data disks only, not as an OS disk: use Premium_LRS, StandardSSD_LRS or Standard_LRS")}
	case "Premium_LRS", "Premium_ZRS":
		if size != "" && !premiumStorageCapable(size) {
			return field.ErrorList{field.Invalid(p, storage, fmt.Sprintf("VM size %s does not support Premium SSD (its name has no \"s\" feature): use StandardSSD_LRS, or a premium-capable size such as the same series with an s (Standard_D2s_v3 for Standard_D2_v3)", size))}
		}
	}
	return nil
}
