package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/availabilitysets"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/resourceskus"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// SizeNotAvailableReason is infrav1's.
const SizeNotAvailableReason = infrav1.SizeNotAvailableReason

// restrictionRecheck is when a machine whose size is restricted looks
// again: a restriction lifts when the subscription's quota or offer
// changes, which sends no event.
const restrictionRecheck = 10 * time.Minute

// availabilitySetGroup is the node group whose availability set a machine
// joins, or "" for none. As CAPZ (azure/scope/machine.go AvailabilitySet,
// @69ec3a40): only where the cluster has no failure domains (a location
// without zones) and the machine asks for none; the control plane's set,
// else its MachineDeployment's, else its MachineSet's.
func availabilitySetGroup(ac *infrav1.AzureCluster, machine *clusterv1.Machine) string {
	if len(ac.Status.FailureDomains) > 0 || machine.Spec.FailureDomain != "" {
		return ""
	}
	if _, cp := machine.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		return availabilitysets.ControlPlaneGroup
	}
	if md := machine.Labels[clusterv1.MachineDeploymentNameLabel]; md != "" {
		return md
	}
	return machine.Labels[clusterv1.MachineSetNameLabel]
}

// placementProblem is why Azure would refuse a VM of this size here, in
// the words a user acts on, or "" when it would not: the size is not
// offered, is restricted for the subscription in the location or the
// zone, cannot boot the image's Hyper-V generation, or cannot take the
// accelerated networking asked for. Azure's own answers (SkuNotAvailable,
// BadRequest, VMSizeIsNotPermittedToEnableAcceleratedNetworking) come
// only after the NIC is made and say less.
func placementProblem(ctx context.Context, svc *cloud.Services, location string, size resourceskus.Size, zone string, img virtualmachines.Image, accelerated *bool) (reason, msg string, err error) {
	if !size.InZone(zone) {
		where := "location " + location
		if zone != "" && !size.Restricted {
			where = fmt.Sprintf("zone %s of %s (it is available in zones %s)", zone, location, orNone(size.Zones))
		}
		why := ""
		if size.Reason != "" {
			why = " (" + size.Reason + ")"
		}
		return SizeNotAvailableReason, fmt.Sprintf("VM size %s is not available to this subscription in %s%s: choose another size, or another failure domain; Azure would refuse the VM with SkuNotAvailable", size.Name, where, why), nil
	}
	if accelerated != nil && *accelerated && !size.AcceleratedNetworking {
		return InvalidConfigurationReason, fmt.Sprintf("spec.acceleratedNetworking is true but VM size %s does not support accelerated networking: leave it unset (winkube then follows the size) or choose a size that has it", size.Name), nil
	}
	if len(size.Generations) == 1 {
		gen, err := imageGeneration(ctx, svc, location, img)
		if err != nil {
			return "", "", err
		}
		if gen != "" && !size.Boots(gen) {
			return InvalidConfigurationReason, fmt.Sprintf("the image is Hyper-V generation %s but VM size %s boots only generation %s: choose a size that boots %s (most current sizes boot both), or a generation %s image",
				strings.TrimPrefix(gen, "V"), size.Name, strings.TrimPrefix(size.Generations[0], "V"), gen, strings.TrimPrefix(size.Generations[0], "V")), nil
		}
	}
	return "", "", nil
}

// imageGeneration reads an image's Hyper-V generation where Azure says it
// before a VM is made: marketplace images and community galleries. ""
// when it cannot be known (a managed image or a private gallery, whose
// definition the VM's PUT checks).
func imageGeneration(ctx context.Context, svc *cloud.Services, location string, img virtualmachines.Image) (string, error) {
	switch {
	case img.CommunityGalleryImageID != "":
		// /CommunityGalleries/<gallery>/Images/<image>/Versions/<version>
		p := strings.Split(strings.Trim(img.CommunityGalleryImageID, "/"), "/")
		if len(p) < 4 {
			return "", nil
		}
		return svc.ImageFacts.GalleryGeneration(ctx, location, p[1], p[3])
	case img.Publisher != "":
		return svc.ImageFacts.MarketplaceGeneration(ctx, location, img.Publisher, img.Offer, img.SKU, img.Version)
	}
	return "", nil
}

func orNone(zones []string) string {
	if len(zones) == 0 {
		return "none"
	}
	return strings.Join(zones, ", ")
}
