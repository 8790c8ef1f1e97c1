package cloud

import (
	"fmt"
	"net/url"
	"strings"
)

// CustomCloud is an Azure cloud outside Azure's public and sovereign ones
// (Azure Stack Hub, an emulator) that the operator lets clusters use. An
// identity's credential goes to AuthorityHost and its tokens to
// ResourceManagerEndpoint, so only the operator may name these hosts: a
// cluster picks one of the configured clouds, never a host of its own.
type CustomCloud struct {
	// Name is how the operator and the error messages call the cloud.
	Name string
	// ResourceManagerEndpoint and AuthorityHost are https:// URLs.
	ResourceManagerEndpoint, AuthorityHost string
	// CACertPEM is the only CA trusted for the cloud's endpoints; the
	// system's roots when empty.
	CACertPEM []byte
}

// Matches says whether a cluster's endpoints are this cloud's: the same
// https URLs, but for the case of the host and a trailing slash.
func (c CustomCloud) Matches(resourceManager, authority string) bool {
	return SameEndpoint(c.ResourceManagerEndpoint, resourceManager) && SameEndpoint(c.AuthorityHost, authority)
}

func (c CustomCloud) String() string {
	return fmt.Sprintf("%s (resourceManagerEndpoint %s, activeDirectoryAuthorityHost %s)", c.Name, c.ResourceManagerEndpoint, c.AuthorityHost)
}

// SameEndpoint compares two endpoint URLs as Azure's SDK would reach them.
// Anything but a plain https://host[:port][/] URL matches nothing, so that
// a user-info part or a path cannot make a foreign host look configured.
func SameEndpoint(a, b string) bool {
	na, okA := normalEndpoint(a)
	nb, okB := normalEndpoint(b)
	return okA && okB && na == nb
}

func normalEndpoint(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || !strings.EqualFold(u.Scheme, "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "" {
		return "", false
	}
	return "https://" + strings.ToLower(u.Host), true
}

// ParseCustomCloud reads the manager's --custom-cloud value,
// name=NAME,arm=URL,entra=URL[,ca-file=PATH]; the CA file is returned for
// the caller to read.
func ParseCustomCloud(v string) (CustomCloud, string, error) {
	var c CustomCloud
	var caFile string
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return c, "", fmt.Errorf("%q: want name=NAME,arm=URL,entra=URL[,ca-file=PATH]", v)
		}
		switch k {
		case "name":
			c.Name = val
		case "arm":
			c.ResourceManagerEndpoint = val
		case "entra":
			c.AuthorityHost = val
		case "ca-file":
			caFile = val
		default:
			return c, "", fmt.Errorf("%q: unknown key %q (want name, arm, entra, ca-file)", v, k)
		}
	}
	if c.Name == "" {
		return c, "", fmt.Errorf("%q: name the cloud (name=NAME)", v)
	}
	for key, u := range map[string]string{"arm": c.ResourceManagerEndpoint, "entra": c.AuthorityHost} {
		if _, ok := normalEndpoint(u); !ok {
			return c, "", fmt.Errorf("%q: %s=%q must be an https://host[:port] URL", v, key, u)
		}
	}
	return c, caFile, nil
}
