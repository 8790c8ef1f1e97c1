package bootdata

import (
	"bytes"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Kubeadm is the part of a kubeadm configuration file (kubeadm.k8s.io
// v1beta3 or v1beta4) that booting an emulated machine needs.
type Kubeadm struct {
	Init    *InitConfiguration
	Cluster *ClusterConfiguration
	Join    *JoinConfiguration
}

// Arg is a component argument; v1beta4 lists them, v1beta3 maps them.
type Arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Args are read from either form.
type Args []Arg

// UnmarshalJSON accepts a list of {name, value} or a map.
func (a *Args) UnmarshalJSON(data []byte) error {
	var list []Arg
	if err := yaml.Unmarshal(data, &list); err == nil {
		*a = list
		return nil
	}
	var m map[string]string
	if err := yaml.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("arguments are neither a list of {name, value} nor a map: %w", err)
	}
	for k, v := range m {
		*a = append(*a, Arg{Name: k, Value: v})
	}
	return nil
}

// Get returns an argument's value.
func (a Args) Get(name string) (string, bool) {
	for _, x := range a {
		if x.Name == name {
			return x.Value, true
		}
	}
	return "", false
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// NodeRegistration is how the kubelet registers the node.
type NodeRegistration struct {
	Name             string   `json:"name"`
	CRISocket        string   `json:"criSocket"`
	KubeletExtraArgs Args     `json:"kubeletExtraArgs"`
	Taints           *[]Taint `json:"taints"`
}

// InitConfiguration is kubeadm init's.
type InitConfiguration struct {
	NodeRegistration NodeRegistration `json:"nodeRegistration"`
	BootstrapTokens  []struct {
		Token string `json:"token"`
	} `json:"bootstrapTokens"`
	LocalAPIEndpoint struct {
		AdvertiseAddress string `json:"advertiseAddress"`
		BindPort         int32  `json:"bindPort"`
	} `json:"localAPIEndpoint"`
}

// ClusterConfiguration is the cluster's.
type ClusterConfiguration struct {
	ClusterName          string `json:"clusterName"`
	KubernetesVersion    string `json:"kubernetesVersion"`
	ControlPlaneEndpoint string `json:"controlPlaneEndpoint"`
	Networking           struct {
		PodSubnet     string `json:"podSubnet"`
		ServiceSubnet string `json:"serviceSubnet"`
		DNSDomain     string `json:"dnsDomain"`
	} `json:"networking"`
	APIServer struct {
		ExtraArgs Args `json:"extraArgs"`
	} `json:"apiServer"`
	ControllerManager struct {
		ExtraArgs Args `json:"extraArgs"`
	} `json:"controllerManager"`
	Scheduler struct {
		ExtraArgs Args `json:"extraArgs"`
	} `json:"scheduler"`
	Etcd struct {
		Local *struct {
			ExtraArgs Args `json:"extraArgs"`
		} `json:"local"`
		External *struct {
			Endpoints []string `json:"endpoints"`
		} `json:"external"`
	} `json:"etcd"`
}

// JoinConfiguration is kubeadm join's.
type JoinConfiguration struct {
	NodeRegistration NodeRegistration `json:"nodeRegistration"`
	Discovery        struct {
		BootstrapToken *struct {
			Token                    string   `json:"token"`
			APIServerEndpoint        string   `json:"apiServerEndpoint"`
			CACertHashes             []string `json:"caCertHashes"`
			UnsafeSkipCAVerification bool     `json:"unsafeSkipCAVerification"`
		} `json:"bootstrapToken"`
	} `json:"discovery"`
	// Timeouts are kubeadm v1beta4's ("5m0s"); empty means kubeadm's
	// default.
	Timeouts struct {
		Discovery          string `json:"discovery"`
		KubeletHealthCheck string `json:"kubeletHealthCheck"`
		TLSBootstrap       string `json:"tlsBootstrap"`
	} `json:"timeouts"`
	ControlPlane *struct {
		LocalAPIEndpoint struct {
			AdvertiseAddress string `json:"advertiseAddress"`
			BindPort         int32  `json:"bindPort"`
		} `json:"localAPIEndpoint"`
	} `json:"controlPlane"`
}

// NodeRegistration is the registration of whichever configuration the
// machine runs (init or join).
func (k Kubeadm) NodeRegistration() NodeRegistration {
	if k.Join != nil {
		return k.Join.NodeRegistration
	}
	if k.Init != nil {
		return k.Init.NodeRegistration
	}
	return NodeRegistration{}
}

// ParseKubeadm reads a multi-document kubeadm configuration.
func ParseKubeadm(data []byte) (Kubeadm, error) { return parseKubeadm(data) }

// parseKubeadm reads a multi-document kubeadm configuration.
func parseKubeadm(data []byte) (Kubeadm, error) {
	var k Kubeadm
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(bytes.Trim(bytes.TrimSpace(doc), "-"))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return k, fmt.Errorf("not kubeadm configuration YAML: %w", err)
		}
		if !strings.HasPrefix(meta.APIVersion, "kubeadm.k8s.io/") {
			continue // KubeletConfiguration and the like
		}
		var err error
		switch meta.Kind {
		case "InitConfiguration":
			k.Init = &InitConfiguration{}
			err = yaml.Unmarshal(doc, k.Init)
		case "ClusterConfiguration":
			k.Cluster = &ClusterConfiguration{}
			err = yaml.Unmarshal(doc, k.Cluster)
		case "JoinConfiguration":
			k.Join = &JoinConfiguration{}
			err = yaml.Unmarshal(doc, k.Join)
		}
		if err != nil {
			return k, fmt.Errorf("%s: %w", meta.Kind, err)
		}
	}
	return k, nil
}
