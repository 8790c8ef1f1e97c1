package arm

import (
	"bufio"
	"embed"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/winkube/winkube/dotted"
)

// The image catalog is the emulator's own data: the URNs and gallery images
// Azure publishes, each file naming where its facts come from.
//
//go:embed catalog/*.txt
var catalogFiles embed.FS

// MarketplaceImage is one published version of a marketplace image.
type MarketplaceImage struct {
	Publisher, Offer, SKU, Version string
	// OS is the image's osDiskImage.operatingSystem: Linux or Windows.
	OS string
	// Plan says the image is sold through a purchase plan (its publisher
	// is a third party): a VM or scale set made from it must name the
	// plan (name = SKU, product = offer, publisher).
	Plan bool
	// Generation is the image's hyperVGeneration: V1 (BIOS) or V2 (UEFI).
	// A VM boots it only on a size whose HyperVGenerations include it.
	Generation string
}

func (m MarketplaceImage) generation() string {
	if m.Generation == "" {
		return "V1"
	}
	return m.Generation
}

// URN is publisher:offer:sku:version, as az vm image list prints it.
func (m MarketplaceImage) URN() string {
	return m.Publisher + ":" + m.Offer + ":" + m.SKU + ":" + m.Version
}

// GalleryImage is an image definition of a community gallery and its
// published versions.
type GalleryImage struct {
	// Gallery is the gallery's public name.
	Gallery, Name string
	// OS is the definition's osType: Linux or Windows.
	OS       string
	Versions []string
}

// Catalog is what the VirtualMachineImages and community gallery APIs serve.
type Catalog struct {
	Marketplace []MarketplaceImage
	Community   []GalleryImage
}

// DefaultCatalog is the catalog in the emulator's data files
// (emulator/arm/catalog).
func DefaultCatalog() *Catalog {
	c, err := parseCatalog()
	if err != nil {
		panic(err) // the files are part of the binary: a test keeps them parseable
	}
	return c
}

func parseCatalog() (*Catalog, error) {
	c := &Catalog{}
	err := eachLine("catalog/marketplace.txt", func(f []string) error {
		urn := strings.Split(f[0], ":")
		if len(f) < 2 || len(urn) != 4 || !validOS(f[1]) {
			return fmt.Errorf("want publisher:offer:sku:version, Linux or Windows, then plan for an image with a purchase plan and V2 for a generation 2 image")
		}
		im := MarketplaceImage{Publisher: urn[0], Offer: urn[1], SKU: urn[2], Version: urn[3], OS: f[1], Generation: "V1"}
		for _, flag := range f[2:] {
			switch flag {
			case "plan":
				im.Plan = true
			case "V2":
				im.Generation = "V2"
			default:
				return fmt.Errorf("unknown flag %q: want plan or V2", flag)
			}
		}
		c.Marketplace = append(c.Marketplace, im)
		return nil
	})
	if err != nil {
		return nil, err
	}
	byName := map[string]int{}
	err = eachLine("catalog/community-galleries.txt", func(f []string) error {
		if len(f) < 4 || !validOS(f[2]) {
			return fmt.Errorf("want gallery, image, Linux or Windows, and versions")
		}
		k := strings.ToLower(f[0] + "/" + f[1])
		i, ok := byName[k]
		if !ok {
			i = len(c.Community)
			byName[k] = i
			c.Community = append(c.Community, GalleryImage{Gallery: f[0], Name: f[1], OS: f[2]})
		}
		if c.Community[i].OS != f[2] {
			return fmt.Errorf("%s/%s has two OS types", f[0], f[1])
		}
		c.Community[i].Versions = append(c.Community[i].Versions, f[3:]...)
		return nil
	})
	return c, err
}

func validOS(s string) bool { return s == "Linux" || s == "Windows" }

func eachLine(name string, fn func([]string) error) error {
	f, err := catalogFiles.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(strings.Fields(line)); err != nil {
			return fmt.Errorf("arm: %s:%d: %w", name, n, err)
		}
	}
	return sc.Err()
}

// imageDiskGB is the size of an image's OS disk. Azure's images say it in
// their metadata; the emulator's catalog does not record it and uses the sizes
// of Azure's own platform images: 30 GB for Linux, 127 GB for Windows.
func imageDiskGB(os string) float64 {
	if os == "Windows" {
		return 127
	}
	return 30
}

// marketplaceImages is the marketplace catalog as it is now.
func (s *Server) marketplaceImages() []MarketplaceImage {
	s.catalogMu.RLock()
	defer s.catalogMu.RUnlock()
	return s.opts.Catalog.Marketplace
}

// PublishImage adds a version to the marketplace catalog while the
// emulator serves, as a publisher's new build appears in Azure's (for
// cncf-upstream's version-free SKUs, a new date in the last field of a
// Kubernetes release's version).
func (s *Server) PublishImage(im MarketplaceImage) {
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	s.opts.Catalog.Marketplace = append(s.opts.Catalog.Marketplace[:len(s.opts.Catalog.Marketplace):len(s.opts.Catalog.Marketplace)], im)
}

func (s *Server) marketplace(pub, offer, sku string) []MarketplaceImage {
	var out []MarketplaceImage
	for _, im := range s.marketplaceImages() {
		if strings.EqualFold(im.Publisher, pub) && strings.EqualFold(im.Offer, offer) && strings.EqualFold(im.SKU, sku) {
			out = append(out, im)
		}
	}
	sort.Slice(out, func(i, j int) bool { return dotted.Less(out[i].Version, out[j].Version) })
	return out
}

func (s *Server) galleryImage(gallery, name string) *GalleryImage {
	for i, g := range s.opts.Catalog.Community {
		if strings.EqualFold(g.Gallery, gallery) && strings.EqualFold(g.Name, name) {
			return &s.opts.Catalog.Community[i]
		}
	}
	return nil
}

func knownLocation(l string) bool {
	_, ok := locations[normalizeLocation(l)]
	return ok
}

// serveImages answers the VirtualMachineImages API from the catalog:
// publishers/P/artifacttypes/vmimage/offers[/O/skus[/S/versions[/V]]].
func (s *Server) serveImages(w http.ResponseWriter, location string, seg []string) {
	if !knownLocation(location) {
		writeError(w, errorf(http.StatusNotFound, "NoRegisteredProviderFound", "No registered resource provider found for location '%s'.", location))
		return
	}
	pub := seg[0]
	match := strings.EqualFold
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	switch len(seg) {
	case 4: // offers
		for _, im := range s.marketplaceImages() {
			if match(im.Publisher, pub) {
				add(im.Offer)
			}
		}
	case 6: // skus
		for _, im := range s.marketplaceImages() {
			if match(im.Publisher, pub) && match(im.Offer, seg[4]) {
				add(im.SKU)
			}
		}
	case 8: // versions
		for _, im := range s.marketplace(pub, seg[4], seg[6]) {
			add(im.Version)
		}
	case 9: // one version
		for _, im := range s.marketplace(pub, seg[4], seg[6]) {
			if im.Version == seg[8] {
				props := map[string]any{
					"osDiskImage":      map[string]any{"operatingSystem": im.OS},
					"hyperVGeneration": im.generation(), "architecture": "x64",
				}
				if im.Plan {
					props["plan"] = map[string]any{"name": im.SKU, "product": im.Offer, "publisher": im.Publisher}
				}
				writeJSON(w, http.StatusOK, map[string]any{
					"name": im.Version, "location": location,
					"id":         "/Subscriptions/x/Providers/Microsoft.Compute/Locations/" + location + "/Publishers/" + im.Publisher + "/ArtifactTypes/VMImage/Offers/" + im.Offer + "/Skus/" + im.SKU + "/Versions/" + im.Version,
					"properties": props,
				})
				return
			}
		}
	default:
		writeError(w, errorf(http.StatusNotFound, "NotFound", "No route for the image path."))
		return
	}
	if len(names) == 0 {
		writeError(w, errorf(http.StatusNotFound, "NotFound", "Artifact: VMImage was not found."))
		return
	}
	items := make([]any, 0, len(names))
	for _, n := range names {
		items = append(items, map[string]any{"name": n, "location": location, "id": "/Subscriptions/x/Providers/Microsoft.Compute/Locations/" + location + "/Publishers/" + pub + "/" + n})
	}
	// The images API answers a bare array, not {"value": [...]}.
	writeJSON(w, http.StatusOK, items)
}

// serveCommunityGallery answers the community gallery APIs:
// communityGalleries/G[/images[/I[/versions[/V]]]] (seg starts at G).
func (s *Server) serveCommunityGallery(w http.ResponseWriter, location string, seg []string) {
	if !knownLocation(location) {
		writeError(w, errorf(http.StatusNotFound, "NoRegisteredProviderFound", "No registered resource provider found for location '%s'.", location))
		return
	}
	gallery := seg[0]
	var defs []GalleryImage
	for _, g := range s.opts.Catalog.Community {
		if strings.EqualFold(g.Gallery, gallery) {
			defs = append(defs, g)
		}
	}
	if len(defs) == 0 {
		writeError(w, errorf(http.StatusNotFound, "ResourceNotFound", "The community gallery '%s' was not found in location '%s'.", gallery, location))
		return
	}
	base := "/CommunityGalleries/" + defs[0].Gallery
	image := func(g GalleryImage) map[string]any {
		return map[string]any{
			"name": g.Name, "location": location, "type": "Microsoft.Compute/locations/communityGalleryImage",
			"identifier": map[string]any{"uniqueId": base + "/Images/" + g.Name},
			"properties": map[string]any{
				"osType": g.OS, "osState": "Generalized", "hyperVGeneration": "V1", "architecture": "x64",
				"identifier": map[string]any{"publisher": defs[0].Gallery, "offer": g.Name, "sku": g.Name},
			},
		}
	}
	version := func(g GalleryImage, v string) map[string]any {
		return map[string]any{
			"name": v, "location": location, "type": "Microsoft.Compute/locations/communityGalleryImageVersion",
			"identifier": map[string]any{"uniqueId": base + "/Images/" + g.Name + "/Versions/" + v},
			"properties": map[string]any{
				"excludeFromLatest": false,
				"storageProfile":    map[string]any{"osDiskImage": map[string]any{"diskSizeGB": imageDiskGB(g.OS), "hostCaching": "ReadWrite"}},
			},
		}
	}
	switch len(seg) {
	case 1:
		writeJSON(w, http.StatusOK, map[string]any{"name": defs[0].Gallery, "location": location, "type": "Microsoft.Compute/locations/communityGallery",
			"identifier": map[string]any{"uniqueId": base}})
		return
	case 2:
		var items []any
		for _, g := range defs {
			items = append(items, image(g))
		}
		writeList(w, items)
		return
	}
	g := s.galleryImage(gallery, seg[2])
	if g == nil {
		writeError(w, errorf(http.StatusNotFound, "ResourceNotFound", "The gallery image %s/Images/%s was not found in location '%s'.", base, seg[2], location))
		return
	}
	switch len(seg) {
	case 3:
		writeJSON(w, http.StatusOK, image(*g))
	case 4:
		vs := append([]string(nil), g.Versions...)
		sort.Slice(vs, func(i, j int) bool { return dotted.Less(vs[i], vs[j]) })
		items := make([]any, 0, len(vs))
		for _, v := range vs {
			items = append(items, version(*g, v))
		}
		writeList(w, items)
	case 5:
		for _, v := range g.Versions {
			if v == seg[4] {
				writeJSON(w, http.StatusOK, version(*g, v))
				return
			}
		}
		writeError(w, galleryImageNotFound(base+"/Images/"+g.Name+"/Versions/"+seg[4], location))
	default:
		writeError(w, errorf(http.StatusNotFound, "NotFound", "No route for the community gallery path."))
	}
}

func galleryImageNotFound(id, location string) *armError {
	e := errorf(http.StatusNotFound, "GalleryImageNotFound", "The gallery image %s is not available in %s region. Please contact image owner to replicate to this region, or change your requested region.", id, location)
	e.Target = "imageReference"
	return e
}

// imageOf resolves a VM's image reference as Azure does when it creates the
// VM: the image must exist in the VM's location, and it gives the OS and the
// size of the OS disk. A missing image of any kind is refused with the code
// Azure answers for that kind.
func (s *Server) imageOf(ref map[string]any, location string) (os string, sizeGB float64, e *armError) {
	if ref == nil {
		return "", 0, invalidParameter("imageReference", "Required parameter 'imageReference' is missing (null).")
	}
	switch {
	case str(ref, "communityGalleryImageId") != "":
		return s.communityImageOf(str(ref, "communityGalleryImageId"), location)
	case str(ref, "sharedGalleryImageId") != "":
		// Directly shared galleries are not emulated: none exists, as in
		// a subscription nobody shared a gallery with.
		return "", 0, galleryImageNotFound(str(ref, "sharedGalleryImageId"), location)
	case str(ref, "id") != "":
		id := str(ref, "id")
		img := s.lookup(id)
		if img == nil || img.deleting || img.kind.typ != kindImage || !sameLocation(str(img.body, "location"), location) {
			if strings.Contains(strings.ToLower(id), "/providers/microsoft.compute/galleries/") {
				return "", 0, galleryImageNotFound(id, location)
			}
			e := errorf(http.StatusNotFound, "NotFound", "The Image '%s' cannot be found in '%s' region.", id, location)
			e.Target = "imageReference"
			return "", 0, e
		}
		osDisk := obj(obj(img.props(), "storageProfile"), "osDisk")
		size, _ := osDisk["diskSizeGB"].(float64)
		return str(osDisk, "osType"), size, nil
	}
	pub, offer, sku, version := str(ref, "publisher"), str(ref, "offer"), str(ref, "sku"), str(ref, "version")
	versions := s.marketplace(pub, offer, sku)
	for i := len(versions) - 1; i >= 0; i-- {
		if strings.EqualFold(version, "latest") || versions[i].Version == version {
			return versions[i].OS, imageDiskGB(versions[i].OS), nil
		}
	}
	e = errorf(http.StatusNotFound, "PlatformImageNotFound", "The platform image '%s:%s:%s:%s' is not available. Verify that all fields in the storage profile are correct. For more details about storage profile information, please refer to https://aka.ms/storageprofile", pub, offer, sku, version)
	e.Target = "imageReference"
	return "", 0, e
}

// communityImageOf resolves /CommunityGalleries/G/Images/I/Versions/V (V may
// be "latest").
func (s *Server) communityImageOf(id, location string) (string, float64, *armError) {
	seg := strings.Split(strings.Trim(id, "/"), "/")
	if len(seg) != 6 || !strings.EqualFold(seg[0], "CommunityGalleries") || !strings.EqualFold(seg[2], "Images") || !strings.EqualFold(seg[4], "Versions") {
		return "", 0, invalidParameter("imageReference.communityGalleryImageId", "The community gallery image ID '%s' is not of the form /CommunityGalleries/{publicGalleryName}/Images/{imageName}/Versions/{version}.", id)
	}
	g := s.galleryImage(seg[1], seg[3])
	if g != nil {
		if strings.EqualFold(seg[5], "latest") {
			if len(g.Versions) > 0 {
				return g.OS, imageDiskGB(g.OS), nil
			}
		} else {
			for _, v := range g.Versions {
				if v == seg[5] {
					return g.OS, imageDiskGB(g.OS), nil
				}
			}
		}
	}
	if strings.EqualFold(seg[5], "latest") {
		return "", 0, invalidParameter("imageReference", "In region %s, the following list of Shared Image Gallery images referenced from the deployment template were not found: %s.", location, id)
	}
	return "", 0, galleryImageNotFound(id, location)
}

// Managed images (Microsoft.Compute/images): enough for a VM to be created
// from one by ID.

const kindImage = "Microsoft.Compute/images"

func init() {
	register(&kindInfo{typ: kindImage, topLevel: true, put: putImage})
}

func putImage(_ *Server, r, _ *resource) *armError {
	osDisk := obj(obj(r.props(), "storageProfile"), "osDisk")
	if !validOS(str(osDisk, "osType")) {
		return invalidParameter("storageProfile.osDisk.osType", "Required parameter 'osType' must be Linux or Windows.")
	}
	if str(osDisk, "osState") == "" {
		osDisk["osState"] = "Generalized"
	}
	if size, _ := osDisk["diskSizeGB"].(float64); size == 0 {
		osDisk["diskSizeGB"] = imageDiskGB(str(osDisk, "osType"))
	}
	return nil
}

// servePublishers answers VirtualMachineImages_ListPublishers: every
// publisher of the catalog, as a bare array like the rest of the images API.
func (s *Server) servePublishers(w http.ResponseWriter, location string) {
	if !knownLocation(location) {
		writeError(w, errorf(http.StatusNotFound, "NoRegisteredProviderFound", "No registered resource provider found for location '%s'.", location))
		return
	}
	seen := map[string]bool{}
	items := []any{}
	for _, im := range s.marketplaceImages() {
		if seen[strings.ToLower(im.Publisher)] {
			continue
		}
		seen[strings.ToLower(im.Publisher)] = true
		items = append(items, map[string]any{"name": im.Publisher, "location": location,
			"id": "/Subscriptions/x/Providers/Microsoft.Compute/Locations/" + location + "/Publishers/" + im.Publisher})
	}
	writeJSON(w, http.StatusOK, items)
}

// planMissing is the failure of a VM or scale set made from a marketplace
// image sold through a purchase plan without naming the plan: Azure
// accepts the request and fails its provisioning with
// VMMarketplaceInvalidInput (the message as azure-cli, Terraform and
// Packer users report it, e.g. hashicorp/terraform-provider-azurerm
// #28797, 2025). The plan's terms acceptance (MarketplaceAgreements) is
// not emulated.
func (s *Server) planMissing(r *resource, ref map[string]any) *armError {
	pub, offer, sku, version := str(ref, "publisher"), str(ref, "offer"), str(ref, "sku"), str(ref, "version")
	needs := false
	for _, im := range s.marketplace(pub, offer, sku) {
		if strings.EqualFold(version, "latest") || im.Version == version {
			needs = im.Plan
		}
	}
	if !needs {
		return nil
	}
	plan, _ := r.body["plan"].(map[string]any)
	if plan != nil && strings.EqualFold(str(plan, "name"), sku) && strings.EqualFold(str(plan, "product"), offer) && strings.EqualFold(str(plan, "publisher"), pub) {
		return nil
	}
	return errorf(http.StatusBadRequest, "VMMarketplaceInvalidInput", "Creating a virtual machine from Marketplace image or a custom image sourced from a Marketplace image requires Plan information in the request. VM: '%s'.", r.idStr)
}
