package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/dotted"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/images"
)

// imageRow is one published image version, with what winkube knows of it.
type imageRow struct {
	Offer             string `json:"offer,omitempty"`
	Publisher         string `json:"publisher,omitempty"`
	SKU               string `json:"sku,omitempty"`
	URN               string `json:"urn,omitempty"`
	Version           string `json:"version"`
	Source            string `json:"source"`
	Gallery           string `json:"gallery,omitempty"`
	Image             string `json:"image,omitempty"`
	ID                string `json:"id,omitempty"`
	OS                string `json:"os"`
	WindowsVersion    string `json:"windowsVersion,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion"`
	Runtime           string `json:"containerRuntime,omitempty"`
}

type imagesOptions struct {
	os, windowsVersion, kubernetesVersion, location, source, runtime, output string
	all                                                                      bool
	armEndpoint, armToken, armCAFile, subscription                           string
}

// sources the flags accept, and what each means to internal/images.
var imageSources = map[string]images.Source{"marketplace": images.Marketplace, "gallery": images.CommunityGallerySource, "community-gallery": images.CommunityGallerySource}

func (o *imagesOptions) addFilters(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.os, "os", "", "windows or linux (default: both for list, linux for resolve)")
	f.StringVar(&o.windowsVersion, "windows-version", "", "Windows Server release: 2019, 2022 or 2025")
	f.StringVar(&o.kubernetesVersion, "kubernetes-version", "", "Kubernetes version the image carries (v1.31.1)")
	f.StringVar(&o.location, "location", "westeurope", "Azure location whose catalog is read")
	f.StringVar(&o.source, "source", "", "marketplace or gallery (Cluster API's community gallery)")
	f.StringVarP(&o.output, "output", "o", "table", "table, json or yaml")
	f.StringVar(&o.armEndpoint, "arm-endpoint", "", "Azure Resource Manager endpoint whose catalog is read, such as a 'winkube emulator' (default: an emulator started for the command, which serves the local world's catalog)")
	f.StringVar(&o.armToken, "arm-token", os.Getenv("WINKUBE_ARM_TOKEN"), "bearer token for --arm-endpoint (default $WINKUBE_ARM_TOKEN)")
	f.StringVar(&o.armCAFile, "arm-ca-file", "", "CA certificate that --arm-endpoint's TLS certificate chains to")
	f.StringVar(&o.subscription, "subscription-id", "00000000-0000-0000-0000-000000000000", "subscription whose view of the catalog is read")
}

// Validate refuses what no image can match, naming what would, and a flag
// that would be ignored, before any catalog is read.
func (o *imagesOptions) Validate() error {
	if err := o.validate(); err != nil {
		return badInput(nil, err)
	}
	return nil
}

func (o *imagesOptions) validate() error {
	if o.location == "" {
		o.location = "westeurope"
	}
	o.os = strings.ToLower(o.os)
	switch o.os {
	case "", "windows", "linux":
	default:
		return fmt.Errorf("--os %q: use windows or linux", o.os)
	}
	if o.windowsVersion != "" {
		if _, ok := images.WindowsBuild[infrav1.WindowsServerVersion(o.windowsVersion)]; !ok {
			return fmt.Errorf("--windows-version %q is not a Windows Server release winkube has images for: use %s", o.windowsVersion, strings.Join(windowsReleases(), ", "))
		}
		if o.os == "linux" {
			return fmt.Errorf("--windows-version %s with --os linux: drop one of them", o.windowsVersion)
		}
	}
	if o.kubernetesVersion != "" {
		if _, err := images.ParseVersion(o.kubernetesVersion); err != nil {
			return err
		}
	}
	if _, ok := imageSources[o.source]; o.source != "" && !ok {
		return fmt.Errorf("--source %q: use marketplace or gallery", o.source)
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return fmt.Errorf("-o %q: use table, json or yaml", o.output)
	}
	// Without --arm-endpoint the catalog is an emulator's started for the
	// command, with its own CA: the file would be read by nothing.
	if o.armCAFile != "" && o.armEndpoint == "" {
		return fmt.Errorf("--arm-ca-file %s is the CA of --arm-endpoint's certificate: give --arm-endpoint too, or drop it", o.armCAFile)
	}
	return nil
}

// imagesListOptions is `winkube images list`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); internal/images reads
// the catalog.
type imagesListOptions struct{ imagesOptions }

// Run lists the matching images on out.
func (o *imagesListOptions) Run(ctx context.Context, out io.Writer) error {
	return o.readCatalog(func(l catalogLister) error {
		rows, err := listImages(ctx, l, &o.imagesOptions)
		if err != nil {
			return err
		}
		return writeImages(out, rows, o.output)
	})
}

// imagesResolveOptions is `winkube images resolve`'s input.
type imagesResolveOptions struct{ imagesOptions }

// Validate also wants the Kubernetes version the image follows and a
// container runtime the images carry.
func (o *imagesResolveOptions) Validate() error {
	if err := o.imagesOptions.Validate(); err != nil {
		return err
	}
	if o.kubernetesVersion == "" {
		return badInputf(nil, "--kubernetes-version is required: the image follows the nodes' Kubernetes version")
	}
	switch infrav1.ContainerRuntime(o.runtime) {
	case "", infrav1.Containerd, infrav1.Dockershim:
	default:
		return badInputf(nil, "--runtime %q: use %s or %s", o.runtime, infrav1.Containerd, infrav1.Dockershim)
	}
	return nil
}

// Run prints the image winkube would boot a node from on out.
func (o *imagesResolveOptions) Run(ctx context.Context, out io.Writer) error {
	return o.readCatalog(func(l catalogLister) error {
		row, err := resolveImage(ctx, l, &o.imagesOptions)
		if err != nil {
			return err
		}
		return writeImage(out, row, o.output)
	})
}

// osType is the API's spelling of an OS name given in lower case.
func osType(os string) infrav1.OSType {
	switch os {
	case "windows":
		return infrav1.Windows
	case "linux":
		return infrav1.Linux
	}
	return ""
}

func windowsReleases() []string {
	var out []string
	for v := range images.WindowsBuild {
		out = append(out, string(v))
	}
	sort.Strings(out)
	return out
}

// catalogLister is what images lists and resolves through: Azure's
// VirtualMachineImages and community gallery APIs, as the controllers read
// them (internal/images over internal/azure/vmimages).
type catalogLister interface {
	images.Lister
	images.GalleryLister
}

// armCatalog reads the catalog of --arm-endpoint, or of an Azure emulator
// started in this process for the call (the catalog the local world's
// Azure serves). close ends what it started.
func (o *imagesOptions) armCatalog() (l catalogLister, close func(), err error) {
	cfg := endpoint.Config{ResourceManagerEndpoint: o.armEndpoint, Credential: endpoint.StaticToken(o.armToken)}
	close = func() {}
	if o.armEndpoint == "" {
		token := "winkube-images"
		srv, err := arm.New(arm.Options{Token: token})
		if err != nil {
			return nil, nil, err
		}
		if err := srv.Start("127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		close = func() { _ = srv.Close() }
		cfg = endpoint.Config{ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken(token)}
	} else if o.armCAFile != "" {
		if cfg.CACertPEM, err = os.ReadFile(o.armCAFile); err != nil {
			return nil, nil, fmt.Errorf("--arm-ca-file: %w", err)
		}
	}
	lister, err := vmimages.New(o.subscription, cfg)
	if err != nil {
		close()
		return nil, nil, err
	}
	return lister, close, nil
}

// readCatalog hands read the catalog armCatalog reaches, and ends what it
// started for the call.
func (o *imagesOptions) readCatalog(read func(catalogLister) error) error {
	l, done, err := o.armCatalog()
	if err != nil {
		return err
	}
	defer done()
	return read(l)
}

func newImagesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "List and resolve the node images winkube uses",
		Long: `The Cluster API reference images winkube boots nodes from: the cncf-upstream
marketplace offers (capi-windows, capi) and Cluster API's community gallery
(` + images.CommunityGallery + `, image capi-win-<year>-containerd, version =
the Kubernetes version). Both commands use the resolver the controllers use.`,
	}
	cmd.AddCommand(newImagesListCommand(), newImagesResolveCommand())
	return cmd
}

func newImagesListCommand() *cobra.Command {
	o := &imagesListOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List published images, as 'az vm image list --publisher cncf-upstream --offer capi-windows --all' does",
		Long: `List the reference images. Without --all, the newest build of each SKU and
Kubernetes version (the one winkube picks); with --all, every version.`,
		Example: `  winkube images list --os windows --all
  winkube images list --os windows --windows-version 2019 --kubernetes-version v1.22.1
  winkube images list --source gallery --kubernetes-version v1.31.1 -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	o.addFilters(cmd)
	cmd.Flags().BoolVar(&o.all, "all", false, "every version, not only the newest build of each SKU and Kubernetes version")
	return cmd
}

func newImagesResolveCommand() *cobra.Command {
	o := &imagesResolveOptions{}
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Print the image winkube would boot a node from",
		Example: `  winkube images resolve --os windows --windows-version 2022 --kubernetes-version v1.31.1
  winkube images resolve --os windows --kubernetes-version v1.31.1 --source gallery -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout()) })
		},
	}
	o.addFilters(cmd)
	cmd.Flags().StringVar(&o.runtime, "runtime", "", "containerd (default) or dockershim (Kubernetes 1.23 and older)")
	return cmd
}

// resolveImage asks the controllers' resolver for a node's default image.
func resolveImage(ctx context.Context, l catalogLister, o *imagesOptions) (imageRow, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	req := images.Request{Location: o.location, KubernetesVersion: o.kubernetesVersion, OS: osType(o.os),
		WindowsVersion: infrav1.WindowsServerVersion(o.windowsVersion), Runtime: infrav1.ContainerRuntime(o.runtime), Source: imageSources[o.source]}
	img, err := images.NewResolver(l, time.Minute).Resolve(ctx, nil, req)
	if err != nil {
		return imageRow{}, err
	}
	v, _ := images.ParseVersion(o.kubernetesVersion)
	os, win := "linux", req.WindowsVersion
	if req.OS == infrav1.Windows {
		os = "windows"
		if win == "" {
			win = infrav1.WindowsServer2022
		}
	}
	switch {
	case img.Marketplace != nil:
		m := img.Marketplace
		row := marketplaceRow(m.Offer, m.SKU, m.Version)
		row.KubernetesVersion, row.OS, row.WindowsVersion = v.String(), os, string(win)
		return row, nil
	case img.ComputeGallery != nil:
		return galleryRow(img.ComputeGallery.Gallery, img.ComputeGallery.Name, img.ComputeGallery.Version, os, string(win)), nil
	}
	return imageRow{}, fmt.Errorf("the resolver returned an image of a kind winkube cannot print")
}

// listImages walks the catalog's offers and SKUs, and the community
// gallery's images for the versions it publishes, keeping what the filters
// match.
func listImages(ctx context.Context, l catalogLister, o *imagesOptions) ([]imageRow, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var want *images.Version
	if o.kubernetesVersion != "" {
		v, _ := images.ParseVersion(o.kubernetesVersion)
		want = &v
	}
	var rows []imageRow
	offers := []string{images.WindowsOffer, images.LinuxOffer}
	for _, offer := range offers {
		skus, err := l.ListSKUs(ctx, o.location, images.Publisher, offer)
		if err != nil {
			return nil, fmt.Errorf("listing %s:%s in %s: %w", images.Publisher, offer, o.location, err)
		}
		for _, sku := range skus {
			versions, err := l.ListVersions(ctx, o.location, images.Publisher, offer, sku)
			if err != nil {
				return nil, fmt.Errorf("listing %s:%s:%s in %s: %w", images.Publisher, offer, sku, o.location, err)
			}
			newestOf := map[string]string{} // Kubernetes version -> newest build
			var skuRows []imageRow
			for _, ver := range versions {
				row := marketplaceRow(offer, sku, ver)
				if row.KubernetesVersion == "" {
					continue // not a reference image winkube understands
				}
				skuRows = append(skuRows, row)
				if cur, ok := newestOf[row.KubernetesVersion]; !ok || dotted.Less(cur, ver) {
					newestOf[row.KubernetesVersion] = ver
				}
			}
			for _, row := range skuRows {
				if !o.all && newestOf[row.KubernetesVersion] != row.Version {
					continue
				}
				rows = append(rows, row)
			}
		}
	}
	// The community gallery: one image definition per OS and Windows
	// release, its versions named after Kubernetes releases.
	for _, def := range []struct{ os, win string }{{"linux", ""}, {"windows", "2019"}, {"windows", "2022"}, {"windows", "2025"}} {
		name := images.GalleryImageName(images.Request{OS: osType(def.os), WindowsVersion: infrav1.WindowsServerVersion(def.win)})
		versions, err := l.ListGalleryImageVersions(ctx, o.location, images.CommunityGallery, name)
		if err != nil {
			return nil, fmt.Errorf("listing %s/%s in %s: %w", images.CommunityGallery, name, o.location, err)
		}
		sort.Slice(versions, func(i, j int) bool { return dotted.Less(versions[i], versions[j]) })
		for _, v := range versions {
			if _, err := images.ParseVersion(v); err != nil {
				continue // not a Kubernetes release
			}
			rows = append(rows, galleryRow(images.CommunityGallery, name, v, def.os, def.win))
		}
	}
	var out []imageRow
	for _, r := range rows {
		switch {
		case o.os != "" && r.OS != o.os,
			o.windowsVersion != "" && r.WindowsVersion != o.windowsVersion,
			want != nil && r.KubernetesVersion != want.String(),
			o.source != "" && images.Source(r.Source) != imageSources[o.source]:
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// marketplaceRow reads what a reference SKU and version say: old SKUs name
// the Kubernetes version (k8s-1dot22dot1-windows-2019-containerd), new ones
// carry it in the version (128.12.20240717 is v1.28.12).
func marketplaceRow(offer, sku, version string) imageRow {
	row := imageRow{Offer: offer, Publisher: images.Publisher, SKU: sku, Version: version,
		URN: strings.Join([]string{images.Publisher, offer, sku, version}, ":"), Source: string(images.Marketplace),
		OS: "linux", Runtime: string(infrav1.Containerd)}
	if offer == images.WindowsOffer {
		row.OS = "windows"
		for _, w := range windowsReleases() {
			if strings.Contains(sku, "windows-"+w) {
				row.WindowsVersion = w
			}
		}
	}
	if rest, ok := strings.CutPrefix(sku, "k8s-"); ok {
		parts := strings.SplitN(rest, "-", 2)
		if v, err := images.ParseVersion(strings.ReplaceAll(parts[0], "dot", ".")); err == nil {
			row.KubernetesVersion = v.String()
		}
		if row.OS == "windows" && !strings.HasSuffix(sku, "-containerd") {
			row.Runtime = string(infrav1.Dockershim)
		}
		return row
	}
	parts := strings.Split(version, ".")
	if len(parts) == 3 && len(parts[0]) >= 2 {
		if v, err := images.ParseVersion(parts[0][:1] + "." + parts[0][1:] + "." + parts[1]); err == nil {
			row.KubernetesVersion = v.String()
		}
	}
	return row
}

func galleryRow(gallery, image, version, os, win string) imageRow {
	v, _ := images.ParseVersion(version)
	return imageRow{Version: version, Source: string(images.CommunityGallerySource), Gallery: gallery, Image: image,
		ID: "/CommunityGalleries/" + gallery + "/Images/" + image + "/Versions/" + version, OS: os, WindowsVersion: win,
		KubernetesVersion: v.String(), Runtime: string(infrav1.Containerd)}
}

// writeImages prints rows: marketplace rows in the table 'az vm image list'
// prints, gallery rows in one of their own.
func writeImages(w io.Writer, rows []imageRow, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []imageRow{}
		}
		return enc.Encode(rows)
	case "yaml":
		out, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	var market, gallery [][]string
	for _, r := range rows {
		if r.Source == string(images.Marketplace) {
			market = append(market, []string{r.Offer, r.Publisher, r.SKU, r.URN, r.Version})
		} else {
			gallery = append(gallery, []string{r.Gallery, r.Image, r.Version, r.ID})
		}
	}
	if len(market) == 0 && len(gallery) == 0 {
		_, err := fmt.Fprintln(w, "no image matches")
		return err
	}
	var b strings.Builder
	if len(market) > 0 {
		table(&b, []string{"Offer", "Publisher", "Sku", "Urn", "Version"}, market)
	}
	if len(gallery) > 0 {
		if len(market) > 0 {
			b.WriteString("\n")
		}
		table(&b, []string{"Gallery", "Image", "Version", "Id"}, gallery)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeImage prints one resolved image: a one-row table, or one object.
func writeImage(w io.Writer, row imageRow, format string) error {
	if format == "json" || format == "yaml" {
		return printStructured(w, format, row)
	}
	return writeImages(w, []imageRow{row}, format)
}

// table writes columns two spaces apart, the header underlined by dashes as
// wide as each column, as the Azure CLI's table output does.
func table(b *strings.Builder, header []string, rows [][]string) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			if i == len(cells)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(b, "%-*s  ", width[i], c)
			}
		}
		b.WriteString("\n")
	}
	line(header)
	dashes := make([]string, len(header))
	for i := range header {
		dashes[i] = strings.Repeat("-", width[i])
	}
	line(dashes)
	for _, r := range rows {
		line(r)
	}
}
