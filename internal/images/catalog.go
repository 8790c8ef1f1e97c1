package images

import (
	"context"
	"sort"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/dotted"
)

// CatalogImage is one published image version.
type CatalogImage struct {
	Publisher, Offer, SKU, Version string
	OS                             infrav1.OSType
}

// Catalog is a fixed set of published marketplace images: a Lister that
// answers without HTTP, for tests and for callers that know the images. The
// images Azure (or the emulator) publishes are read through the SDK
// (internal/azure/vmimages), not from here.
type Catalog []CatalogImage

// ListSKUs lists the SKUs of an offer (every location carries the same catalog).
func (c Catalog) ListSKUs(_ context.Context, _ string, publisher, offer string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, im := range c {
		if im.Publisher == publisher && im.Offer == offer && !seen[im.SKU] {
			seen[im.SKU] = true
			out = append(out, im.SKU)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ListVersions lists the versions of a SKU.
func (c Catalog) ListVersions(_ context.Context, _ string, publisher, offer, sku string) ([]string, error) {
	var out []string
	for _, im := range c {
		if im.Publisher == publisher && im.Offer == offer && im.SKU == sku {
			out = append(out, im.Version)
		}
	}
	sort.Slice(out, func(i, j int) bool { return dotted.Less(out[i], out[j]) })
	return out, nil
}
