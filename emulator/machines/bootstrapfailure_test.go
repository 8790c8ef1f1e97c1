package machines_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/naming"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/rehearsal"
)

// TestBrokenBootstrapsNeverJoin is issue 35 item 3: workers whose
// bootstrap config a rehearsal broke (only their inputs) boot against a
// real control plane; each fails by its mechanism, its node never
// registers, the VM's instance view says why and the agent's log on its
// disk carries the lines cloud-init, cloudbase-init, kubeadm and the
// kubelet write. A Windows file that does not decode does not stop
// cloudbase-init: that node joins.
func TestBrokenBootstrapsNeverJoin(t *testing.T) {
	ctx := context.Background()
	startBootstrapProvider(t)
	m, _, _, _ := newMixedCluster(t, ctx, "bootfail")
	// The package's clusters share the runtime's host addresses, which
	// follow private addresses alone (one VNet per local world): this
	// cluster's machines must be gone before the next test's take the same
	// private addresses in their own VNet.
	t.Cleanup(func() { deleteGroup(t, m.azure.rg) })
	m.controlPlaneInitialized(t, ctx)

	// A token issued to expire before its machine boots: the token
	// cleaner deletes it and cluster-info is never signed with it.
	expired := rehearsal.TokenSecret("rhrsl0", "0123456789abcdef", time.Now().Add(time.Second))
	if _, err := m.workload.CoreV1().Secrets(expired.Namespace).Create(ctx, expired, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := m.workload.CoreV1().Secrets(expired.Namespace).Get(ctx, expired.Name, metav1.GetOptions{}); err == nil {
			return "the expired token is not cleaned up yet"
		}
		return ""
	})

	type want struct {
		err  string   // in the instance view's boot failure
		logs []string // in the agent's log
		// kubelet is in the kubelet's log.
		kubelet string
	}
	preKubeadm := want{err: "before it ran kubeadm join"}
	cases := []struct {
		name    string
		class   rehearsal.Class
		windows bool
		want    want
		joins   bool
	}{
		{"bf-lin-precmd", rehearsal.PreKubeadmCommand, false, want{preKubeadm.err, []string{"bash: /opt/winkube/rehearsal/prepare-node.sh: No such file or directory", "cc_scripts_user.py[WARNING]: Failed to run module scripts_user"}, ""}, false},
		{"bf-win-precmd", rehearsal.PreKubeadmCommand, true, want{preKubeadm.err, []string{"The argument 'C:/k/rehearsal/prepare-node.ps1' to the -File parameter does not exist", "User_data script ended with return code: 1"}, ""}, false},
		{"bf-lin-file", rehearsal.MalformedFile, false, want{`unable to read config from "/run/kubeadm/kubeadm-join-config.yaml"`, []string{"log_util.py[WARNING]: Running module write_files"}, ""}, false},
		{"bf-win-file", rehearsal.MalformedFile, true, want{"", []string{"Fail to decode base64 content.", "This node has joined the cluster"}, ""}, true},
		{"bf-win-token", rehearsal.ExpiredToken, true, want{`could not find a JWS signature in the cluster-info ConfigMap for token ID "rhrsl0"`, []string{"error execution phase preflight: couldn't validate the identity of the API Server"}, ""}, false},
		{"bf-lin-cahash", rehearsal.WrongCAHash, false, want{"cluster CA found in cluster-info ConfigMap is invalid: none of the public keys", nil, ""}, false},
		{"bf-win-endpoint", rehearsal.UnreachableEndpoint, true, want{"failed to request the cluster-info ConfigMap", []string{rehearsal.UnreachableAddress}, ""}, false},
		{"bf-win-flag", rehearsal.UnknownKubeletFlag, true, want{"error execution phase kubelet-start", []string{"[kubelet-check] The kubelet is not healthy after", "This error is likely caused by"}, "unknown flag: --azure-container-registry-config"}, false},
		{"bf-lin-cri", rehearsal.WrongCRISocket, false, want{"error execution phase kubelet-start", nil, `validate CRI v1 runtime API for endpoint \"unix:///var/run/crio/crio.sock\"`}, false},
		{"bf-win-cri", rehearsal.WrongCRISocket, true, want{"error execution phase kubelet-start", []string{"Couldn't create the interface used for talking to the container runtime"}, `open \\\\.\\pipe\\containerd: The system cannot find the file specified.`}, false},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		tmpl := "bootfail-md-0"
		if tc.windows {
			tmpl = "bootfail-md-win"
		}
		spec := m.template(tmpl)
		spec = *spec.DeepCopy()
		if err := rehearsal.Break(&spec, tc.class, rehearsal.Options{Windows: tc.windows, Token: "rhrsl0.0123456789abcdef", Discovery: 3 * time.Second, KubeletHealthCheck: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		data := bootstrapData(t, ctx, m.cluster, tc.name, false, spec)
		vm := virtualmachines.Spec{Name: tc.name, ComputerName: tc.name, CustomData: data, Image: resolveImage(t, images.Request{OS: infrav1.Linux})}
		if tc.windows {
			vm.Windows, vm.ComputerName = true, naming.WindowsMachineName(tc.name)
			vm.Image = resolveImage(t, images.Request{OS: infrav1.Windows, WindowsVersion: infrav1.WindowsServer2022, Runtime: infrav1.Containerd})
		}
		wg.Add(1)
		go func() { defer wg.Done(); m.azure.vm(t, ctx, vm, m.azure.nodeSubnet) }()
	}
	wg.Wait()
	vms, err := endpoint.NewClient(armCfg, subscriptID, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		computer := tc.name
		if tc.windows {
			computer = naming.WindowsMachineName(tc.name)
		}
		if tc.joins {
			poll.Until(t, 2*time.Minute, func() string {
				if _, err := m.workload.CoreV1().Nodes().Get(ctx, computer, metav1.GetOptions{}); err != nil {
					return tc.name + ": " + err.Error()
				}
				return ""
			})
		} else {
			msg := bootFailure(t, ctx, vms, m.azure.rg, tc.name)
			if !strings.Contains(msg, tc.want.err) {
				t.Errorf("%s: boot failed with %q, want %q", tc.name, msg, tc.want.err)
			}
			if _, err := m.workload.CoreV1().Nodes().Get(ctx, computer, metav1.GetOptions{}); err == nil {
				t.Errorf("%s: its node registered", tc.name)
			}
		}
		boot, kubelet := machineLogs(t, tc.name, tc.windows)
		for _, line := range tc.want.logs {
			if !strings.Contains(boot, line) {
				t.Errorf("%s: the boot log lacks %q:\n%s", tc.name, line, boot)
			}
		}
		if !strings.Contains(kubelet, tc.want.kubelet) {
			t.Errorf("%s: the kubelet log lacks %q:\n%s", tc.name, tc.want.kubelet, kubelet)
		}
	}
}

// bootFailure waits for a VM's instance view to show its boot failed and
// returns the message.
func bootFailure(t *testing.T, ctx context.Context, vms *armcompute.VirtualMachinesClient, rg, name string) string {
	t.Helper()
	msg := ""
	poll.Until(t, time.Minute, func() string {
		iv, err := vms.InstanceView(ctx, rg, name, nil)
		if err != nil {
			return err.Error()
		}
		for _, s := range iv.Statuses {
			if s.Code != nil && *s.Code == "BootStatus/failed" && s.Message != nil {
				msg = *s.Message
				return ""
			}
		}
		return name + " shows no boot failure"
	})
	return msg
}

// machineLogs reads a machine's agent and kubelet logs from its disk,
// where a Run Command would read them.
func machineLogs(t *testing.T, vm string, windows bool) (boot, kubelet string) {
	t.Helper()
	for _, n := range rt.Nodes() {
		if n.Machine != vm {
			continue
		}
		disk := vmdisk.Disk{Root: filepath.Join(n.Dir, "root"), Windows: windows}
		read := func(service string) string {
			p, err := disk.HostPath(vmdisk.LogPath(windows, service))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			return string(b)
		}
		return read(vmdisk.Boot), read(vmdisk.Kubelet)
	}
	t.Fatalf("no machine %s", vm)
	return "", ""
}

// deleteGroup deletes a resource group and waits until the runtime has
// stopped its machines.
func deleteGroup(t *testing.T, rg string) {
	t.Helper()
	ctx := context.Background()
	rgs, err := resourcegroups.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	var apiServers []string
	for _, n := range rt.Nodes() {
		if strings.HasPrefix(filepath.Base(n.Dir), rg+"-") && n.APIServer != "" {
			apiServers = append(apiServers, n.APIServer)
		}
	}
	until(t, ctx, func(tok string) (string, bool, error) { return rgs.Delete(ctx, rg, tok) })
	// The runtime forgets a machine as it starts stopping it: its API
	// server's port is free once its processes are gone.
	poll.Until(t, 2*time.Minute, func() string {
		for _, n := range rt.Nodes() {
			if strings.HasPrefix(filepath.Base(n.Dir), rg+"-") {
				return "machine " + n.Machine + " of " + rg + " still runs"
			}
		}
		for _, a := range apiServers {
			if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
				c.Close()
				return "the API server at " + a + " still answers"
			}
		}
		return ""
	})
}
