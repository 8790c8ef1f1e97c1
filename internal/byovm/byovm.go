// Package byovm makes and removes a plain Windows Server VM that no
// Cluster API object owns, the machine 'winkube node join' is for, the
// way a user makes one with 'az vm create': a public IP, a NIC in an
// existing subnet, and a VM from Microsoft's Windows Server image whose
// custom data only creates an SSH user (cloudbase-init's users plugin,
// cloudbase/cloudbase-init cloudbaseinit/plugins/common/userdataplugins/
// cloudconfigplugins/users.py @cae4135e3be9dce5f32c3a384420678b22ca6223,
// writes ssh_authorized_keys to the user's .ssh/authorized_keys). It
// calls Azure through the provider's own services and the Azure SDK, so
// it does against the local world's emulator what it does against Azure.
package byovm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/naming"
)

// Images are Microsoft's Windows Server images by release, as 'az vm
// image list --publisher MicrosoftWindowsServer --offer WindowsServer
// --all' names their Hyper-V generation 2 SKUs.
var Images = map[infrav1.WindowsServerVersion]virtualmachines.Image{
	infrav1.WindowsServer2019: {Publisher: "MicrosoftWindowsServer", Offer: "WindowsServer", SKU: "2019-datacenter-gensecond", Version: "latest"},
	infrav1.WindowsServer2022: {Publisher: "MicrosoftWindowsServer", Offer: "WindowsServer", SKU: "2022-datacenter-g2", Version: "latest"},
	infrav1.WindowsServer2025: {Publisher: "MicrosoftWindowsServer", Offer: "WindowsServer", SKU: "2025-datacenter-g2", Version: "latest"},
}

// DefaultSize is the VM size when none is given (CAPZ's templates' worker
// size).
const DefaultSize = "Standard_D2s_v3"

// TagKey marks what this package made, so Delete removes nothing else.
const TagKey = "winkube.dev_byo-machine"

// Spec is the machine to make.
type Spec struct {
	// Name is the VM's name and its computer (host) name.
	Name           string
	WindowsVersion infrav1.WindowsServerVersion
	ResourceGroup  string
	Location       string
	// SubnetID is the ARM ID of the subnet its NIC joins.
	SubnetID string
	Size     string
	// User is the SSH user cloudbase-init creates (an Administrator);
	// SSHPublicKey its authorized key, an OpenSSH public key line.
	User, SSHPublicKey string
}

// Validate checks the spec alone.
func (s Spec) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("name the machine"))
	} else if len(s.Name) > naming.MaxWindowsComputerName {
		errs = append(errs, fmt.Errorf("%q has %d characters: a Windows computer name has at most %d (NetBIOS); choose a shorter name", s.Name, len(s.Name), naming.MaxWindowsComputerName))
	}
	if _, ok := Images[s.WindowsVersion]; !ok {
		errs = append(errs, fmt.Errorf("--windows %q: use 2019, 2022 or 2025", s.WindowsVersion))
	}
	if s.ResourceGroup == "" || s.Location == "" || s.SubnetID == "" {
		errs = append(errs, errors.New("a resource group, a location and a subnet are needed"))
	}
	if s.User == "" || !strings.HasPrefix(s.SSHPublicKey, "ssh-") && !strings.HasPrefix(s.SSHPublicKey, "ecdsa-") {
		errs = append(errs, errors.New("an SSH user and an OpenSSH public key (ssh-ed25519 ..., ssh-rsa ...) are needed to log in"))
	}
	return errors.Join(errs...)
}

// Machine is a made machine.
type Machine struct {
	ID, PrivateIP, PublicIP string
}

func names(vm string) (pip, nic string) { return vm + "-ip", vm + "-nic" }

// CustomData is the cloud-config that creates the SSH user and nothing
// else.
func CustomData(user, key string) []byte {
	return []byte(fmt.Sprintf("#cloud-config\nusers:\n- name: %s\n  groups: Administrators\n  ssh_authorized_keys:\n  - %s\n", user, strings.TrimSpace(key)))
}

// Create makes the public IP, the NIC and the VM, and waits for them.
func Create(ctx context.Context, svc *cloud.Services, s Spec, progress func(string)) (*Machine, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Size == "" {
		s.Size = DefaultSize
	}
	tags := map[string]*string{TagKey: to.Ptr(s.Name)}
	pipName, nicName := names(s.Name)
	// A resource of the same name that this package did not make for this
	// machine is someone else's (a cluster's VM, a user's NIC): taking it
	// over would report, and later delete, what the user never asked for.
	// One this package made (a retry after a failure) is carried on.
	if err := refuseForeign(ctx, svc, s.ResourceGroup, s.Name, pipName, nicName); err != nil {
		return nil, err
	}
	progress("creating public IP " + pipName)
	if err := until(ctx, func(tok string) (string, bool, error) {
		return svc.PublicIPs.Reconcile(ctx, publicips.Spec{ResourceGroup: s.ResourceGroup, Name: pipName, Location: s.Location, Tags: tags}, tok)
	}); err != nil {
		return nil, fmt.Errorf("public IP %s: %w", pipName, err)
	}
	pip, err := svc.PublicIPs.Get(ctx, s.ResourceGroup, pipName)
	if err != nil {
		return nil, err
	}
	progress("creating network interface " + nicName)
	if err := until(ctx, func(tok string) (string, bool, error) {
		return svc.NICs.Reconcile(ctx, networkinterfaces.Spec{ResourceGroup: s.ResourceGroup, Name: nicName, Location: s.Location, SubnetID: s.SubnetID, PublicIPID: *pip.ID, Tags: tags}, tok)
	}); err != nil {
		return nil, fmt.Errorf("network interface %s: %w", nicName, err)
	}
	nic, err := svc.NICs.Get(ctx, s.ResourceGroup, nicName)
	if err != nil {
		return nil, err
	}
	password, err := randomPassword()
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("creating VM %s (Windows Server %s, %s)", s.Name, s.WindowsVersion, s.Size))
	spec := virtualmachines.Spec{ResourceGroup: s.ResourceGroup, Name: s.Name, Location: s.Location, Size: s.Size, Windows: true, ComputerName: s.Name,
		Image: Images[s.WindowsVersion], CustomData: CustomData(s.User, s.SSHPublicKey), AdminUsername: s.User, AdminPassword: password,
		NICID: *nic.ID, Tags: tags}
	var id string
	if err := until(ctx, func(tok string) (string, bool, error) {
		vm, next, err := svc.VMs.Reconcile(ctx, spec, tok)
		if vm != nil && vm.ID != nil {
			id = *vm.ID
		}
		return next, vm != nil, err
	}); err != nil {
		return nil, fmt.Errorf("VM %s: %w", s.Name, err)
	}
	m := &Machine{ID: id, PrivateIP: networkinterfaces.PrivateIP(nic)}
	if pip.Properties != nil && pip.Properties.IPAddress != nil {
		m.PublicIP = *pip.Properties.IPAddress
	}
	return m, nil
}

// Delete removes the VM, its NIC and its public IP, each only when this
// package made it for that VM.
func Delete(ctx context.Context, svc *cloud.Services, rg, name string, progress func(string)) error {
	vm, err := svc.VMs.Get(ctx, rg, name)
	if err != nil {
		return fmt.Errorf("VM %s in resource group %s: %w", name, rg, err)
	}
	if vm == nil {
		return fmt.Errorf("there is no VM %s in resource group %s", name, rg)
	}
	if !ownedBy(vm.Tags, name) {
		return fmt.Errorf("VM %s in resource group %s was not made by 'winkube machine create' (no %s tag): delete it with the tool that made it", name, rg, TagKey)
	}
	pipName, nicName := names(name)
	if !virtualmachines.DeletesOSDisk(vm) {
		// Made before its OS disk went with it: the disk would stay behind.
		progress("having Azure delete VM " + name + "'s OS disk with it")
		if err := until(ctx, func(tok string) (string, bool, error) { return svc.VMs.DeleteOSDiskWithVM(ctx, rg, name, tok) }); err != nil {
			return fmt.Errorf("setting VM %s's OS disk to be deleted with it: %w", name, err)
		}
	}
	progress("deleting VM " + name + " and its OS disk")
	if err := until(ctx, func(tok string) (string, bool, error) { return svc.VMs.Delete(ctx, rg, name, tok) }); err != nil {
		return fmt.Errorf("deleting VM %s: %w", name, err)
	}
	// The NIC and the public IP are found by name only, so each is deleted
	// only when its own tag says this package made it for this machine.
	nic, err := svc.NICs.Get(ctx, rg, nicName)
	if err != nil {
		return fmt.Errorf("network interface %s in resource group %s: %w", nicName, rg, err)
	}
	if nic != nil {
		if err := deleteOwned(ctx, "network interface", nicName, name, nic.Tags, svc.NICs.Delete, rg, progress); err != nil {
			return err
		}
	}
	pip, err := svc.PublicIPs.Get(ctx, rg, pipName)
	if err != nil {
		return fmt.Errorf("public IP %s in resource group %s: %w", pipName, rg, err)
	}
	if pip != nil {
		return deleteOwned(ctx, "public IP", pipName, name, pip.Tags, svc.PublicIPs.Delete, rg, progress)
	}
	return nil
}

// deleteOwned deletes resource name of kind what when its tags say this
// package made it for machine, and otherwise says it leaves it.
func deleteOwned(ctx context.Context, what, name, machine string, tags map[string]*string,
	del func(ctx context.Context, rg, name, tok string) (string, bool, error), rg string, progress func(string)) error {
	if !ownedBy(tags, machine) {
		progress(fmt.Sprintf("leaving %s %s: it has no %s tag naming %s, so 'winkube machine create' did not make it", what, name, TagKey, machine))
		return nil
	}
	progress("deleting " + what + " " + name)
	if err := until(ctx, func(tok string) (string, bool, error) { return del(ctx, rg, name, tok) }); err != nil {
		return fmt.Errorf("deleting %s %s: %w", what, name, err)
	}
	return nil
}

// ownedBy reports whether tags mark a resource as made by this package for
// the machine named machine.
func ownedBy(tags map[string]*string, machine string) bool {
	v, ok := tags[TagKey]
	return ok && v != nil && *v == machine
}

// refuseForeign fails when a VM, NIC or public IP of the machine's names
// exists without the tag naming this machine.
func refuseForeign(ctx context.Context, svc *cloud.Services, rg, vmName, pipName, nicName string) error {
	const notOurs = "%s %s already exists in resource group %s and 'winkube machine create' did not make it (no %s tag naming %s): choose another machine name"
	vm, err := svc.VMs.Get(ctx, rg, vmName)
	if err != nil {
		return fmt.Errorf("VM %s in resource group %s: %w", vmName, rg, err)
	}
	if vm != nil && !ownedBy(vm.Tags, vmName) {
		return fmt.Errorf(notOurs, "VM", vmName, rg, TagKey, vmName)
	}
	nic, err := svc.NICs.Get(ctx, rg, nicName)
	if err != nil {
		return fmt.Errorf("network interface %s in resource group %s: %w", nicName, rg, err)
	}
	if nic != nil && !ownedBy(nic.Tags, vmName) {
		return fmt.Errorf(notOurs, "network interface", nicName, rg, TagKey, vmName)
	}
	pip, err := svc.PublicIPs.Get(ctx, rg, pipName)
	if err != nil {
		return fmt.Errorf("public IP %s in resource group %s: %w", pipName, rg, err)
	}
	if pip != nil && !ownedBy(pip.Tags, vmName) {
		return fmt.Errorf(notOurs, "public IP", pipName, rg, TagKey, vmName)
	}
	return nil
}

// until runs an ARM operation's steps until it is done.
func until(ctx context.Context, step func(tok string) (string, bool, error)) error {
	tok := ""
	for {
		next, done, err := step(tok)
		if err != nil || done {
			return err
		}
		tok = next
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// randomPassword is the VM's admin password, which nobody is told: the
// machine is reached by SSH key only, as CAPZ's Windows machines are.
func randomPassword() (string, error) {
	const sets = "abcdefghijkmnopqrstuvwxyz" + "ABCDEFGHJKLMNPQRSTUVWXYZ" + "23456789" + "!@#%*-_+="
	b := []byte("aA1!")
	for len(b) < 24 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(sets))))
		if err != nil {
			return "", err
		}
		b = append(b, sets[n.Int64()])
	}
	return string(b), nil
}
