package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// seedCatalog holds the images of the seeds' 'az vm image list --publisher
// cncf-upstream --offer capi-windows --all' tables.
func seedCatalog() images.Catalog {
	var c images.Catalog
	for _, sku := range []string{"k8s-1dot18dot13-windows-2019", "k8s-1dot19dot5-windows-2019", "k8s-1dot20dot0-windows-2019"} {
		c = append(c, images.CatalogImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: sku, Version: "2020.12.11", OS: infrav1.Windows})
	}
	for _, sku := range []string{"k8s-1dot22dot1-windows-2019-containerd", "k8s-1dot22dot2-windows-2019-containerd"} {
		c = append(c, images.CatalogImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: sku, Version: "2021.10.15", OS: infrav1.Windows})
	}
	c = append(c,
		images.CatalogImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "windows-2022-containerd-gen1", Version: "131.1.20240717", OS: infrav1.Windows},
		images.CatalogImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "windows-2022-containerd-gen1", Version: "131.1.20240601", OS: infrav1.Windows},
		images.CatalogImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2404-gen1", Version: "131.1.20240717", OS: infrav1.Linux})
	return c
}

// fixedCatalog is a catalog known in advance: images.Catalog for the
// marketplace, and community gallery versions per image definition.
type fixedCatalog struct {
	images.Catalog
	gallery map[string][]string
}

func (f fixedCatalog) ListGalleryImageVersions(_ context.Context, _, gallery, image string) ([]string, error) {
	if gallery != images.CommunityGallery {
		return nil, nil
	}
	return f.gallery[image], nil
}

func testCatalog() fixedCatalog {
	return fixedCatalog{Catalog: seedCatalog(), gallery: map[string][]string{"capi-win-2022-containerd": {"1.31.1", "1.31.0"}, "capi-ubun2-2404": {"1.31.1"}}}
}

// emulatorCatalog is the catalog winkube's Azure emulator serves, read
// over HTTP through the SDK as the controllers read Azure's.
func emulatorCatalog(t *testing.T) catalogLister {
	t.Helper()
	l, done, err := (&imagesOptions{subscription: "00000000-0000-0000-0000-000000000000"}).armCatalog()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	return l
}

func list(t *testing.T, o imagesOptions) (string, error) {
	t.Helper()
	return listFrom(t, testCatalog(), o)
}

func listFrom(t *testing.T, l catalogLister, o imagesOptions) (string, error) {
	t.Helper()
	if o.output == "" {
		o.output = "table"
	}
	if err := o.validate(); err != nil {
		return "", err
	}
	rows, err := listImages(context.Background(), l, &o)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = writeImages(&b, rows, o.output)
	return b.String(), err
}

func TestImagesListPrintsTheSeedsTable(t *testing.T) {
	l := emulatorCatalog(t)
	// The seeds' later table, header and row byte for byte.
	out, err := listFrom(t, l, imagesOptions{os: "windows", kubernetesVersion: "v1.22.1", all: true})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 4 ||
		lines[0] != "Offer         Publisher      Sku                                     Urn                                                                           Version" ||
		lines[1] != "------------  -------------  --------------------------------------  ----------------------------------------------------------------------------  ----------" ||
		lines[2] != "capi-windows  cncf-upstream  k8s-1dot22dot1-windows-2019-containerd  cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15  2021.10.15" {
		t.Fatalf("table:\n%s", out)
	}
	// Every URN of the seeds' tables is listed by --all.
	out, err = listFrom(t, l, imagesOptions{os: "windows", source: "marketplace", all: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, urn := range []string{"cncf-upstream:capi-windows:k8s-1dot18dot13-windows-2019:2020.12.11", "cncf-upstream:capi-windows:k8s-1dot19dot5-windows-2019:2020.12.11",
		"cncf-upstream:capi-windows:k8s-1dot20dot0-windows-2019:2020.12.11", "cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15",
		"cncf-upstream:capi-windows:k8s-1dot22dot2-windows-2019-containerd:2021.10.15"} {
		if !strings.Contains(out, "  "+urn+"  ") {
			t.Errorf("the list lacks the seeds' %s", urn)
		}
	}
	// The community gallery's images, version = the Kubernetes release.
	out, err = listFrom(t, l, imagesOptions{source: "gallery", windowsVersion: "2025", kubernetesVersion: "v1.36.3"})
	if err != nil || !strings.Contains(out, "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019  capi-win-2025-containerd  1.36.3") || strings.Contains(out, "Urn") {
		t.Fatalf("gallery: %v\n%s", err, out)
	}
}

func TestImagesListFilters(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         imagesOptions
		want, not []string
	}{
		{"newest build only", imagesOptions{os: "windows", windowsVersion: "2022", source: "marketplace"}, []string{"131.1.20240717"}, []string{"131.1.20240601", "Gallery"}},
		{"all builds", imagesOptions{os: "windows", windowsVersion: "2022", source: "marketplace", all: true}, []string{"131.1.20240717", "131.1.20240601"}, nil},
		{"linux", imagesOptions{os: "linux"}, []string{"ubuntu-2404-gen1", "capi-ubun2-2404  1.31.1"}, []string{"capi-windows"}},
		{"gallery", imagesOptions{source: "gallery", kubernetesVersion: "v1.31.1"}, []string{"Gallery", "capi-win-2022-containerd  1.31.1", "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-win-2022-containerd/Versions/1.31.1"}, []string{"Urn", "k8s-1dot"}},
		{"kubernetes version", imagesOptions{kubernetesVersion: "1.22.2"}, []string{"k8s-1dot22dot2-windows-2019-containerd"}, []string{"1dot22dot1", "gen1"}},
		{"nothing", imagesOptions{kubernetesVersion: "v1.40.0"}, []string{"no image matches"}, []string{"Urn"}},
	} {
		out, err := list(t, tc.o)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%s: output has %q:\n%s", tc.name, n, out)
			}
		}
	}
}

func TestImagesListJSONAndYAML(t *testing.T) {
	o := imagesOptions{os: "windows", kubernetesVersion: "v1.22.1", output: "json"}
	out, err := list(t, o)
	if err != nil {
		t.Fatal(err)
	}
	var rows []imageRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	want := imageRow{Offer: "capi-windows", Publisher: "cncf-upstream", SKU: "k8s-1dot22dot1-windows-2019-containerd", Version: "2021.10.15",
		URN: "cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15", Source: "marketplace",
		OS: "windows", WindowsVersion: "2019", KubernetesVersion: "v1.22.1", Runtime: "containerd"}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows %+v, want [%+v]", rows, want)
	}
	o.output = "yaml"
	out, err = list(t, o)
	if err != nil {
		t.Fatal(err)
	}
	var back []imageRow
	if err := yaml.Unmarshal([]byte(out), &back); err != nil || len(back) != 1 || back[0] != want {
		t.Fatalf("yaml %v %+v:\n%s", err, back, out)
	}
	if !strings.Contains(out, "urn: cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15") {
		t.Fatalf("yaml lacks the URN:\n%s", out)
	}
}

func TestImagesRefuseUnknownInput(t *testing.T) {
	for _, tc := range []struct {
		o    imagesOptions
		want string
	}{
		{imagesOptions{windowsVersion: "2016"}, "use 2019, 2022, 2025"},
		{imagesOptions{os: "macos"}, "use windows or linux"},
		{imagesOptions{source: "shared"}, "use marketplace or gallery"},
		{imagesOptions{kubernetesVersion: "latest"}, "v1.MINOR.PATCH"},
		{imagesOptions{output: "xml"}, "table, json or yaml"},
		{imagesOptions{os: "linux", windowsVersion: "2022"}, "drop one"},
	} {
		if tc.o.output == "" {
			tc.o.output = "table"
		}
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.want)
		}
	}
}

func TestImagesResolveUsesTheControllersResolver(t *testing.T) {
	l := emulatorCatalog(t)
	for _, tc := range []struct {
		o    imagesOptions
		want string
	}{
		// Older releases: the marketplace; the gallery where it publishes,
		// as Cluster API Provider Azure chooses.
		{imagesOptions{os: "windows", kubernetesVersion: "v1.22.1", windowsVersion: "2019"}, "cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15"},
		{imagesOptions{os: "windows", kubernetesVersion: "v1.31.1"}, "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-win-2022-containerd/Versions/1.31.1"},
		{imagesOptions{os: "windows", windowsVersion: "2019", kubernetesVersion: "v1.28.12", source: "marketplace"}, "cncf-upstream:capi-windows:windows-2019-containerd-gen1:128.12.20240717"},
		{imagesOptions{kubernetesVersion: "v1.31.1"}, "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/capi-ubun2-2404/Versions/1.31.1"},
	} {
		tc.o.output = "table"
		if err := tc.o.Validate(); err != nil {
			t.Fatal(err)
		}
		row, err := resolveImage(context.Background(), l, &tc.o)
		if err != nil {
			t.Errorf("%+v: %v", tc.o, err)
			continue
		}
		if row.URN != tc.want && row.ID != tc.want {
			t.Errorf("%+v: got %+v, want %s", tc.o, row, tc.want)
		}
	}
	// What the catalog does not have is refused by the resolver, naming it.
	o := imagesOptions{os: "windows", kubernetesVersion: "v1.22.3", windowsVersion: "2019", output: "table", location: "westeurope"}
	if _, err := resolveImage(context.Background(), l, &o); err == nil || !strings.Contains(err.Error(), "v1.22.3") {
		t.Fatalf("error %v, want one naming v1.22.3", err)
	}
	// Through the command: one object, and --kubernetes-version required.
	var out bytes.Buffer
	cmd := NewRootCommand()
	cmd.SetArgs([]string{"images", "resolve", "--os", "windows", "--windows-version", "2019", "--kubernetes-version", "v1.22.1", "-o", "json"})
	cmd.SetOut(&out)
	var row imageRow
	if err := cmd.Execute(); err != nil || json.Unmarshal(out.Bytes(), &row) != nil || row.SKU != "k8s-1dot22dot1-windows-2019-containerd" {
		t.Fatalf("resolve -o json: %v, %+v:\n%s", err, row, out.String())
	}
	cmd = NewRootCommand()
	cmd.SetArgs([]string{"images", "resolve", "--os", "windows"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--kubernetes-version is required") {
		t.Fatalf("error %v", err)
	}
}
