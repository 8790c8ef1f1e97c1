// Package vmimages lists the Azure VM image catalog (publishers, offers, SKUs,
// versions) through the SDK, for internal/images to choose default images from.
package vmimages

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/images"
)

// Lister reads one subscription's view of the catalog: the marketplace
// and the community galleries.
type Lister struct {
	client   *armcompute.VirtualMachineImagesClient
	gallery  *armcompute.CommunityGalleryImageVersionsClient
	galleryD *armcompute.CommunityGalleryImagesClient
}

// New returns a Lister for the subscription at the endpoint.
func New(subscriptionID string, cfg endpoint.Config) (*Lister, error) {
	c, err := endpoint.NewClient(cfg, subscriptionID, armcompute.NewVirtualMachineImagesClient)
	if err != nil {
		return nil, fmt.Errorf("vmimages: %w", err)
	}
	g, err := endpoint.NewClient(cfg, subscriptionID, armcompute.NewCommunityGalleryImageVersionsClient)
	if err != nil {
		return nil, fmt.Errorf("vmimages: %w", err)
	}
	d, err := endpoint.NewClient(cfg, subscriptionID, armcompute.NewCommunityGalleryImagesClient)
	if err != nil {
		return nil, fmt.Errorf("vmimages: %w", err)
	}
	return &Lister{client: c, gallery: g, galleryD: d}, nil
}

// MarketplaceGeneration is the Hyper-V generation ("V1", "V2") of a
// marketplace image version ("latest" reads the newest).
func (l *Lister) MarketplaceGeneration(ctx context.Context, location, publisher, offer, sku, version string) (string, error) {
	if strings.EqualFold(version, "latest") {
		versions, err := l.ListVersions(ctx, location, publisher, offer, sku)
		latest, ok := images.Newest(versions)
		if err != nil || !ok {
			return "", err
		}
		version = latest
	}
	resp, err := l.client.Get(ctx, location, publisher, offer, sku, version, nil)
	if err != nil || resp.Properties == nil || resp.Properties.HyperVGeneration == nil {
		return "", err
	}
	return string(*resp.Properties.HyperVGeneration), nil
}

// GalleryGeneration is the Hyper-V generation of a community gallery's
// image definition.
func (l *Lister) GalleryGeneration(ctx context.Context, location, gallery, image string) (string, error) {
	resp, err := l.galleryD.Get(ctx, location, gallery, image, nil)
	if err != nil || resp.Properties == nil || resp.Properties.HyperVGeneration == nil {
		return "", err
	}
	return string(*resp.Properties.HyperVGeneration), nil
}

// ListSKUs lists the SKUs of an offer in a location.
func (l *Lister) ListSKUs(ctx context.Context, location, publisher, offer string) ([]string, error) {
	resp, err := l.client.ListSKUs(ctx, location, publisher, offer, nil)
	if err != nil {
		return nil, err
	}
	return names(resp.VirtualMachineImageResourceArray), nil
}

// ListVersions lists the versions of a SKU in a location.
func (l *Lister) ListVersions(ctx context.Context, location, publisher, offer, sku string) ([]string, error) {
	resp, err := l.client.List(ctx, location, publisher, offer, sku, nil)
	if err != nil {
		return nil, err
	}
	return names(resp.VirtualMachineImageResourceArray), nil
}

// ListGalleryImageVersions lists the versions of a community gallery's image
// definition in a location; none when the gallery or the definition is not
// there (Azure answers 404).
func (l *Lister) ListGalleryImageVersions(ctx context.Context, location, gallery, image string) ([]string, error) {
	var out []string
	p := l.gallery.NewListPager(location, gallery, image, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		for _, v := range page.Value {
			if v != nil && v.Name != nil {
				out = append(out, *v.Name)
			}
		}
	}
	return out, nil
}

func names(items []*armcompute.VirtualMachineImageResource) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		if it != nil && it.Name != nil {
			out = append(out, *it.Name)
		}
	}
	return out
}
