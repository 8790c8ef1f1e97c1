package release

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/scheme"
)

// ProviderName is winkube's name as an infrastructure provider to
// clusterctl (`clusterctl init --infrastructure winkube`); its repository
// folder is infrastructure-winkube.
const ProviderName = "winkube"

// ProviderLabel is the folder (and the cluster.x-k8s.io/provider label) of
// the provider's repository.
const ProviderLabel = "infrastructure-" + ProviderName

// Files of a release, as clusterctl looks them up.
const (
	MetadataFile   = "metadata.yaml"
	ComponentsFile = "infrastructure-components.yaml"
)

// TemplateFile is the file clusterctl reads for a flavor ("" the default).
func TemplateFile(flavor string) string {
	if flavor == "" {
		return "cluster-template.yaml"
	}
	return "cluster-template-" + flavor + ".yaml"
}

// Metadata maps the release series of version to the Cluster API contract
// winkube implements. clusterctl refuses a release whose series is missing.
func Metadata(version string) (*clusterctlv1.Metadata, error) {
	v, err := semver.ParseTolerant(version)
	if err != nil || version[0] != 'v' {
		return nil, fmt.Errorf("release: version %q is not a semantic version such as v0.1.0", version)
	}
	return &clusterctlv1.Metadata{
		TypeMeta:      metav1.TypeMeta{APIVersion: clusterctlv1.GroupVersion.String(), Kind: "Metadata"},
		ReleaseSeries: []clusterctlv1.ReleaseSeries{{Major: int32(v.Major), Minor: int32(v.Minor), Contract: ContractVersion}},
	}, nil
}

// TemplateFlavors are the flavors a release carries templates of: every
// flavor (windows-dockershim is refused everywhere, see
// flavors.DockershimRefused).
func TemplateFlavors() []string {
	return flavors.Names()
}

// RepositoryOptions say which release to write.
type RepositoryOptions struct {
	// Version of the release, such as v0.1.0.
	Version string
	// Image of the manager the components run.
	Image string
}

// WriteRepository writes a clusterctl provider repository release under
// dir: dir/infrastructure-winkube/<version>/ with the metadata, the
// components and a cluster template per flavor (cluster-template.yaml is
// the default flavor). It returns the release's folder.
func WriteRepository(dir string, o RepositoryOptions) (string, error) {
	md, err := Metadata(o.Version)
	if err != nil {
		return "", err
	}
	components, err := ComponentsYAML(Options{Image: o.Image})
	if err != nil {
		return "", err
	}
	mdYAML, err := yaml.Marshal(md)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{MetadataFile: mdYAML, ComponentsFile: components}
	s := scheme.New()
	for _, flavor := range TemplateFlavors() {
		data, _, err := flavors.Template(s, flavor, "", false)
		if err != nil {
			return "", fmt.Errorf("release: flavor %s: %w", flavor, err)
		}
		files[TemplateFile(flavor)] = data
		if flavor == flavors.Default {
			files[TemplateFile("")] = data
		}
	}
	out := filepath.Join(dir, ProviderLabel, o.Version)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}
