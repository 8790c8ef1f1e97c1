package bootdata_test

import (
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstream"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

var v136 = semver.MustParse("1.36.3")

// The custom data below is made by Cluster API's own kubeadm bootstrap
// code (its cloud-init templates and kubeadm marshallers), byte for byte
// what its bootstrap provider puts in a Machine's bootstrap secret.

func workerData(t *testing.T, windows bool) []byte {
	t.Helper()
	socket := "unix:///var/run/containerd/containerd.sock"
	args := []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}}
	if windows {
		socket = "npipe:////./pipe/containerd-containerd"
		args = append(args, bootstrapv1.Arg{Name: "windows-priorityclass", Value: ptr.To("ABOVE_NORMAL_PRIORITY_CLASS")},
			bootstrapv1.Arg{Name: "register-with-taints", Value: ptr.To("node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule")})
	}
	jc := &bootstrapv1.JoinConfiguration{
		NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: `{{ ds.meta_data["local_hostname"] }}`, CRISocket: socket, KubeletExtraArgs: args},
		Discovery: bootstrapv1.Discovery{BootstrapToken: bootstrapv1.BootstrapTokenDiscovery{
			Token: "abcdef.0123456789abcdef", APIServerEndpoint: "127.1.0.1:6443",
			CACertHashes: []string{"sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988"},
		}},
	}
	s, err := kubeadmtypes.MarshalJoinConfigurationForVersion(jc, v136)
	if err != nil {
		t.Fatal(err)
	}
	users := []bootstrapv1.User{{Name: "capi", Sudo: "ALL=(ALL) NOPASSWD:ALL", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAATEST capi"}}}
	if windows {
		users[0].Groups, users[0].Sudo = "Administrators", ""
	}
	data, err := cloudinit.NewNode(&cloudinit.NodeInput{
		BaseUserData: cloudinit.BaseUserData{
			Users: users, PreKubeadmCommands: []string{"ip link set dev eth0 mtu 1400"}, KubernetesVersion: v136,
			AdditionalFiles: []bootstrapv1.File{{Path: "/etc/winkube/motd", Encoding: bootstrapv1.Base64, Content: "aGVsbG8gd2lua3ViZQ=="}},
		},
		JoinConfiguration: s,
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestWorkerBootData(t *testing.T) {
	for _, windows := range []bool{false, true} {
		b, err := bootdata.Parse(workerData(t, windows), bootdata.Metadata{LocalHostname: "mixed-md-qwert"})
		if err != nil {
			t.Fatalf("windows=%v: %v", windows, err)
		}
		j := b.Kubeadm.Join
		if b.Role != bootdata.Join || j == nil {
			t.Fatalf("role %s, join %v", b.Role, j)
		}
		if j.NodeRegistration.Name != "mixed-md-qwert" {
			t.Fatalf("node name %q: the instance's hostname was not rendered in", j.NodeRegistration.Name)
		}
		bt := j.Discovery.BootstrapToken
		if bt == nil || bt.Token != "abcdef.0123456789abcdef" || bt.APIServerEndpoint != "127.1.0.1:6443" || len(bt.CACertHashes) != 1 {
			t.Fatalf("discovery %+v", bt)
		}
		if v, _ := j.NodeRegistration.KubeletExtraArgs.Get("cloud-provider"); v != "external" {
			t.Fatalf("kubelet args %+v", j.NodeRegistration.KubeletExtraArgs)
		}
		if windows {
			if j.NodeRegistration.CRISocket != "npipe:////./pipe/containerd-containerd" {
				t.Fatalf("Windows CRI socket %q", j.NodeRegistration.CRISocket)
			}
			if v, _ := j.NodeRegistration.KubeletExtraArgs.Get("windows-priorityclass"); v != "ABOVE_NORMAL_PRIORITY_CLASS" {
				t.Fatal("the Windows kubelet's priority class was lost")
			}
			if b.Users[0].Groups != "Administrators" {
				t.Fatalf("Windows user %+v", b.Users[0])
			}
		}
		if f, ok := b.File("/etc/winkube/motd"); !ok || string(f.Content) != "hello winkube" {
			t.Fatalf("base64 write_files entry not decoded: %+v", f)
		}
		if len(b.Users) != 1 || b.Users[0].SSHAuthorizedKeys[0] != "ssh-ed25519 AAAATEST capi" {
			t.Fatalf("users %+v", b.Users)
		}
		if b.RunCmd[0] != "ip link set dev eth0 mtu 1400" || !strings.Contains(b.RunCmd[1], "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml") {
			t.Fatalf("runcmd %q", b.RunCmd)
		}
	}
}

func TestControlPlaneInitBootData(t *testing.T) {
	cc := &bootstrapv1.ClusterConfiguration{ControlPlaneEndpoint: "127.1.0.1:6443"}
	certs := secret.NewCertificatesForInitialControlPlane(cc)
	if err := certs.Generate(); err != nil {
		t.Fatal(err)
	}
	clusterYAML, err := kubeadmtypes.MarshalClusterConfigurationForVersion(cc, v136, &upstream.AdditionalData{
		KubernetesVersion: ptr.To("v1.36.3"), ClusterName: ptr.To("mixed"),
		PodSubnet: ptr.To("192.168.0.0/16"), ServiceSubnet: ptr.To("10.96.0.0/12"),
	})
	if err != nil {
		t.Fatal(err)
	}
	initYAML, err := kubeadmtypes.MarshalInitConfigurationForVersion(&bootstrapv1.InitConfiguration{
		NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: `{{ ds.meta_data["local_hostname"] }}`},
	}, v136)
	if err != nil {
		t.Fatal(err)
	}
	data, err := cloudinit.NewInitControlPlane(&cloudinit.ControlPlaneInput{
		BaseUserData: cloudinit.BaseUserData{KubernetesVersion: v136}, Certificates: certs,
		ClusterConfiguration: clusterYAML, InitConfiguration: initYAML,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootdata.Parse(data, bootdata.Metadata{LocalHostname: "mixed-control-plane-x7k2p"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Role != bootdata.Init || b.Kubeadm.Cluster.ControlPlaneEndpoint != "127.1.0.1:6443" || b.Kubeadm.Cluster.Networking.PodSubnet != "192.168.0.0/16" ||
		b.Kubeadm.Init.NodeRegistration.Name != "mixed-control-plane-x7k2p" {
		t.Fatalf("init boot data: role %s cluster %+v", b.Role, b.Kubeadm.Cluster)
	}
	for _, path := range []string{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/etcd/ca.crt", "/etc/kubernetes/pki/sa.key", "/etc/kubernetes/pki/front-proxy-ca.crt"} {
		f, ok := b.File(path)
		if !ok || !strings.Contains(string(f.Content), "-----BEGIN") {
			t.Fatalf("%s missing or not PEM", path)
		}
	}
}

func TestBrokenCustomDataFailsWithAReason(t *testing.T) {
	good := string(workerData(t, false))
	for name, tc := range map[string]struct{ data, want string }{
		"empty":            {"", "empty"},
		"a shell script":   {"#!/bin/bash\nkubeadm join\n", "not a cloud-config"},
		"not YAML":         {"#cloud-config\nwrite_files: [unclosed\n", "not valid cloud-config YAML"},
		"no kubeadm":       {"#cloud-config\nruncmd:\n  - echo hello\n", "no kubeadm init or kubeadm join"},
		"no join config":   {"#cloud-config\nruncmd:\n  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n", "writes no /run/kubeadm/kubeadm-join-config.yaml"},
		"unknown template": {strings.Replace(good, "#cloud-config", "#cloud-config\n# {{ ds.meta_data.instance_id }}", 1), "cannot render"},
	} {
		_, err := bootdata.Parse([]byte(tc.data), bootdata.Metadata{LocalHostname: "h"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

// TestUndecodableFilesAreTheAgentsBusiness: a file whose content does not
// decode is no reason to refuse the custom data (both agents go on, each
// its own way); the entry keeps its raw content and why it failed, and an
// unknown encoding is plain text.
func TestUndecodableFilesAreTheAgentsBusiness(t *testing.T) {
	good := string(workerData(t, false))
	data := strings.Replace(good, "write_files:\n", "write_files:\n-   path: /x\n    encoding: b64\n    content: 'abcde'\n-   path: /y\n    encoding: gz+b64\n    content: aGVsbG8=\n-   path: /z\n    encoding: rot13\n    content: abc\n", 1)
	b, err := bootdata.Parse([]byte(data), bootdata.Metadata{LocalHostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := b.File("/x")
	if x.DecodeErr == nil || !strings.Contains(x.DecodeErr.Error(), "number of data characters (5)") || x.Raw != "abcde" {
		t.Errorf("/x: %+v", x)
	}
	y, _ := b.File("/y")
	if y.DecodeErr == nil || !strings.Contains(y.DecodeErr.Error(), "Not a gzipped file (b'he')") {
		t.Errorf("/y: %+v", y)
	}
	if d := bootdata.Decode("aGVsbG8=", "gz+b64"); d.Failed != bootdata.StepGzip || string(d.Content) != "hello" {
		t.Errorf("gzip step on base64-decoded content: %+v", d)
	}
	if z, _ := b.File("/z"); z.DecodeErr != nil || string(z.Content) != "abc" {
		t.Errorf("/z: %+v", z)
	}
}

// A cloud-config that only creates users (a user's own VM, such as
// 'winkube machine create' makes) is a plain machine, not broken
// bootstrap data; one that runs commands but no kubeadm still is.
func TestUsersOnlyCloudConfigIsAPlainMachine(t *testing.T) {
	b, err := bootdata.Parse([]byte("#cloud-config\nusers:\n- name: capi\n  groups: Administrators\n  ssh_authorized_keys:\n  - ssh-ed25519 AAAA test\n"), bootdata.Metadata{})
	if err != nil || b.Role != bootdata.Plain || len(b.Users) != 1 || b.Users[0].SSHAuthorizedKeys[0] != "ssh-ed25519 AAAA test" {
		t.Fatalf("users-only cloud-config: %+v, %v; want a plain machine with its user", b, err)
	}
	if _, err := bootdata.Parse([]byte("#cloud-config\nusers:\n- name: capi\nruncmd:\n- echo hello\n"), bootdata.Metadata{}); err == nil || !strings.Contains(err.Error(), "runs no kubeadm") {
		t.Errorf("runcmd without kubeadm: %v, want it refused as before", err)
	}
}
