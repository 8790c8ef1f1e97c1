// Package bootdata reads a VM's custom data as cloud-init (Linux) and
// cloudbase-init (Windows) read what Cluster API's kubeadm bootstrap provider
// writes: a "#cloud-config" document, rendered as a Jinja template with the
// instance's metadata, whose write_files carry the CA, keys and the kubeadm
// configuration, whose runcmd runs kubeadm, and whose users get SSH keys.
// Custom data it cannot read is an error that says why, so that a machine
// with broken custom data fails to boot visibly.
package bootdata

import (
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// File is one write_files entry.
type File struct {
	Path        string
	Owner       string
	Permissions string
	// Content is the decoded content, nil when DecodeErr is set.
	Content []byte
	// Encoding and Raw are the entry as the custom data carries it: the
	// agents differ on what they do with content they cannot decode, so
	// the decision is theirs (see Decode).
	Encoding string
	Raw      string
	// DecodeErr is why Raw does not decode as Encoding says.
	DecodeErr error
}

// User is one users entry.
type User struct {
	Name              string
	Groups            string
	Sudo              string
	SSHAuthorizedKeys []string
}

// Role is what a machine's kubeadm run makes of it.
type Role string

const (
	// Init is the first control-plane machine (kubeadm init).
	Init Role = "init"
	// JoinControlPlane is a further control-plane machine.
	JoinControlPlane Role = "join-control-plane"
	// Join is a worker (kubeadm join).
	Join Role = "join"
	// Plain is a machine no Cluster API object made: its cloud-config
	// only creates users and writes files (no runcmd), as a user's own
	// 'az vm create --custom-data' does; it boots to a login and joins a
	// cluster only if someone joins it by hand.
	Plain Role = "plain"
)

// BootData is the boot plan a machine's custom data describes.
type BootData struct {
	Files  []File
	RunCmd []string
	Users  []User
	Role   Role
	// Kubeadm is the kubeadm configuration the run commands use.
	Kubeadm Kubeadm
}

// File returns the file written to path.
func (b *BootData) File(path string) (File, bool) {
	for _, f := range b.Files {
		if f.Path == path {
			return f, true
		}
	}
	return File{}, false
}

// Paths Cluster API's kubeadm bootstrap provider writes its configuration to.
const (
	InitConfigPath = "/run/kubeadm/kubeadm.yaml"
	JoinConfigPath = "/run/kubeadm/kubeadm-join-config.yaml"
)

type rawConfig struct {
	WriteFiles []struct {
		Path        string `json:"path"`
		Owner       string `json:"owner"`
		Permissions string `json:"permissions"`
		Encoding    string `json:"encoding"`
		Content     string `json:"content"`
	} `json:"write_files"`
	RunCmd []any `json:"runcmd"`
	Users  []struct {
		Name              string   `json:"name"`
		Groups            string   `json:"groups"`
		Sudo              string   `json:"sudo"`
		SSHAuthorizedKeys []string `json:"ssh_authorized_keys"`
	} `json:"users"`
}

// Metadata is what the instance metadata service would tell cloud-init.
type Metadata struct {
	LocalHostname string
}

var jinja = regexp.MustCompile(`{{\s*([^}]*?)\s*}}`)

// render does what cloud-init's Jinja rendering does for the expressions
// Cluster API templates use; anything else is refused rather than left raw.
func render(doc string, md Metadata) (string, error) {
	var bad []string
	out := jinja.ReplaceAllStringFunc(doc, func(m string) string {
		expr := strings.Join(strings.Fields(jinja.FindStringSubmatch(m)[1]), "")
		switch expr {
		case `ds.meta_data["local_hostname"]`, `ds.meta_data['local_hostname']`, `ds.meta_data.local_hostname`, `v1.local_hostname`, `local_hostname`:
			return md.LocalHostname
		}
		bad = append(bad, m)
		return m
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("custom data uses template expressions winkube's boot cannot render: %s", strings.Join(bad, ", "))
	}
	return out, nil
}

// Parse reads custom data for the machine with the given metadata.
func Parse(data []byte, md Metadata) (*BootData, error) {
	text := string(data)
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("custom data is empty: the machine has no bootstrap data")
	}
	lines := strings.SplitN(text, "\n", 3)
	isJinja := strings.HasPrefix(strings.TrimSpace(lines[0]), "## template: jinja")
	first := strings.TrimSpace(lines[0])
	if isJinja && len(lines) > 1 {
		first = strings.TrimSpace(lines[1])
	}
	if first != "#cloud-config" {
		return nil, fmt.Errorf("custom data is not a cloud-config (its first line is %q, not \"#cloud-config\"); cloud-init and cloudbase-init would not run it", truncate(first))
	}
	if isJinja {
		var err error
		if text, err = render(text, md); err != nil {
			return nil, err
		}
	}
	var raw rawConfig
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("custom data is not valid cloud-config YAML: %w", err)
	}
	b := &BootData{}
	for i, f := range raw.WriteFiles {
		if f.Path == "" {
			return nil, fmt.Errorf("write_files[%d] has no path", i)
		}
		file := File{Path: f.Path, Owner: f.Owner, Permissions: f.Permissions, Encoding: f.Encoding, Raw: f.Content}
		d := Decode(f.Content, f.Encoding)
		if d.Err != nil {
			file.DecodeErr = d.Err
		} else {
			file.Content = d.Content
		}
		b.Files = append(b.Files, file)
	}
	for _, c := range raw.RunCmd {
		switch v := c.(type) {
		case string:
			b.RunCmd = append(b.RunCmd, v)
		case []any:
			var parts []string
			for _, p := range v {
				parts = append(parts, fmt.Sprint(p))
			}
			b.RunCmd = append(b.RunCmd, strings.Join(parts, " "))
		default:
			return nil, fmt.Errorf("runcmd entry %v is neither a command line nor a list of arguments", c)
		}
	}
	for _, u := range raw.Users {
		b.Users = append(b.Users, User{Name: u.Name, Groups: u.Groups, Sudo: u.Sudo, SSHAuthorizedKeys: u.SSHAuthorizedKeys})
	}
	if err := b.readKubeadm(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *BootData) readKubeadm() error {
	path := ""
	for _, c := range b.RunCmd {
		switch {
		case strings.Contains(c, "kubeadm init"):
			b.Role, path = Init, InitConfigPath
		case strings.Contains(c, "kubeadm join"):
			b.Role, path = Join, JoinConfigPath
		}
	}
	if b.Role == "" && len(b.RunCmd) == 0 && len(b.Users) > 0 {
		b.Role = Plain
		return nil
	}
	if b.Role == "" {
		return fmt.Errorf("custom data runs no kubeadm init or kubeadm join: it is not bootstrap data of Cluster API's kubeadm provider")
	}
	f, ok := b.File(path)
	if ok && f.DecodeErr != nil {
		return fmt.Errorf("%s: %w", path, f.DecodeErr)
	}
	if !ok {
		return fmt.Errorf("custom data runs kubeadm %s but writes no %s", b.Role, path)
	}
	k, err := parseKubeadm(f.Content)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b.Kubeadm = k
	switch b.Role {
	case Init:
		if k.Init == nil || k.Cluster == nil {
			return fmt.Errorf("%s lacks an InitConfiguration or ClusterConfiguration", path)
		}
	case Join:
		if k.Join == nil {
			return fmt.Errorf("%s lacks a JoinConfiguration", path)
		}
		if k.Join.ControlPlane != nil {
			b.Role = JoinControlPlane
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
