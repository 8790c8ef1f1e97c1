package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// winkube runs the command line as a user would and returns its output.
func winkube(ctx context.Context, args ...string) (string, string, error) {
	root := NewRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// TestNodeAccess is issue 10's end-to-end run in the local world: ssh to
// a Windows worker through the control plane's NAT port, its logs, a
// wrong key refused, RDP refused for Linux and tunnelled for Windows.
func TestNodeAccess(t *testing.T) {
	testenv.SkipIfShort(t, "a booted local world")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	logs := io.Discard
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		logs = os.Stderr
	}
	log.SetLogger(zap.New(zap.WriteTo(logs)))
	start := time.Now()
	state := t.TempDir()
	// The host's own sshd on *:22, as on most laptops, holds port 22 of
	// every loopback address. The test plays it on the addresses this
	// world will use (the first of its block's public and machine ranges):
	// the machines' SSH servers and the NAT rule move to the alternate
	// port, and winkube must never reach the host's.
	block, err := hostnet.ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	block.Release()
	if err := os.WriteFile(filepath.Join(state, localworld.BlockFile), []byte(strconv.Itoa(block.Index)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []netip.Prefix{block.Public, block.Hosts} {
		a := prefix.Addr()
		for range 8 {
			a = a.Next()
			hostSSHD, err := net.Listen("tcp", net.JoinHostPort(a.String(), "22"))
			if err != nil {
				t.Fatal(err)
			}
			defer hostSSHD.Close()
			go func() {
				for {
					c, err := hostSSHD.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("SSH-2.0-the-host-not-a-node\r\n"))
					_ = c.Close()
				}
			}()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := localworld.Start(ctx, localworld.Options{
		Name: "access", Flavor: flavors.Windows, KubernetesVersion: "v1.36.3", ControlPlaneNodes: 1, LinuxNodes: 1, WindowsNodes: 1,
		WindowsVersion: infrav1.WindowsServer2022, StateDir: state, Bin: bin, Log: log.Log,
		Progress: func(s string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.CreateCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WriteKubeconfigs(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ready after %s", time.Since(start).Round(time.Second))

	// A Windows pod, so the node has an HNS endpoint and a CNI ADD to show.
	wcfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wc := kubernetes.NewForConfigOrDie(wcfg)
	iis := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"kubernetes.io/os": "windows"},
		Containers:   []corev1.Container{{Name: "iis", Image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"}},
	}}
	if _, err := wc.CoreV1().Pods("default").Create(ctx, iis, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		p, err := wc.CoreV1().Pods("default").Get(ctx, "iis", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("the IIS pod is not running: %v %v", err, p.Status.Phase)
		}
		iis = p
		return ""
	})

	var win, cp infrav1.AzureMachine
	ams := &infrav1.AzureMachineList{}
	if err := w.Client.List(ctx, ams); err != nil {
		t.Fatal(err)
	}
	for _, am := range ams.Items {
		switch {
		case am.Spec.OS() == infrav1.Windows:
			win = am
		case am.Status.SSHNATPort != 0:
			cp = am
		}
	}
	if len(win.Name) <= 15 || len(win.Status.VMName) > 15 || cp.Status.SSHNATPort != 22 {
		t.Fatalf("want a Windows machine with a long name and a short VM name, and a control plane with NAT port 22: %q/%q, NAT %d", win.Name, win.Status.VMName, cp.Status.SSHNATPort)
	}
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms); err != nil {
		t.Fatal(err)
	}
	linuxNode := ""
	for _, m := range ms.Items {
		if strings.Contains(m.Name, "md-0") || (m.Spec.InfrastructureRef.Name != win.Name && m.Spec.InfrastructureRef.Name != cp.Name) {
			linuxNode = m.Status.NodeRef.Name
		}
	}
	local := []string{"--state-dir", state}

	// ssh to the Windows worker by its AzureMachine name: through the
	// control plane's NAT port 22 on the API server's address, then to
	// the node's private address; the node answers with its computer name.
	out, hops, err := winkube(ctx, append([]string{"ssh", win.Name}, append(local, "--", "hostname")...)...)
	if err != nil || strings.TrimSpace(out) != win.Status.VMName {
		t.Fatalf("winkube ssh %s -- hostname: %q, %v\n%s", win.Name, out, err, hops)
	}
	endpoint := ""
	cl := &clusterv1.Cluster{}
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "access"}, cl); err == nil {
		endpoint = cl.Spec.ControlPlaneEndpoint.Host
	}
	if !strings.Contains(hops, "jump host capi@"+endpoint+":22") || !strings.Contains(hops, "through "+endpoint+":22") {
		t.Fatalf("the hops do not go through the API server's NAT port %s:22:\n%s", endpoint, hops)
	}
	t.Logf("ssh: %s", strings.ReplaceAll(strings.TrimSpace(hops), "\n", " | "))

	// The Linux worker by its Node name, and a command's exit status.
	if out, _, err := winkube(ctx, append([]string{"ssh", linuxNode, "-q"}, append(local, "--", "hostname")...)...); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("winkube ssh %s (a Node name) -- hostname: %q, %v", linuxNode, out, err)
	}
	_, errOut, err := winkube(ctx, append([]string{"ssh", win.Name, "-q"}, append(local, "--", "Restart-Computer")...)...)
	var status ExitStatus
	if !errors.As(err, &status) || status != 127 || !strings.Contains(errOut, "cannot run") {
		t.Fatalf("a command the emulated machine cannot run: %v, %q", err, errOut)
	}

	// A key the node was not given is refused.
	stranger := filepath.Join(t.TempDir(), "id_ed25519")
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	pemKey, _ := ssh.MarshalPrivateKey(priv, "")
	if err := os.WriteFile(stranger, pem.EncodeToMemory(pemKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := winkube(ctx, append([]string{"ssh", win.Name, "-i", stranger, "--no-agent"}, append(local, "--", "hostname")...)...); err == nil || !strings.Contains(err.Error(), "refused the key") {
		t.Fatalf("a wrong key: %v", err)
	}

	// logs of the Windows node: cloudbase-init's and the kubelet's among them.
	logDir := filepath.Join(t.TempDir(), "win-logs")
	out, _, err = winkube(ctx, append([]string{"logs", win.Status.VMName, "--write-to", logDir}, local...)...)
	if err != nil {
		t.Fatalf("winkube logs: %v\n%s", err, out)
	}
	t.Logf("logs:\n%s", out)
	for _, c := range [][2]string{
		{"cloudbase-init.log", "cloudbase-init (winkube machine runtime)"},
		{"cloudbase-init.log", ":10022, 1 authorized key(s), password login disabled"},
		{"kubelet.log", "Successfully registered node " + strings.ToLower(win.Status.VMName)},
		{"containerd.log", "StartContainer"},
		{"hns-networks.json", `"Name": "Calico"`},
		{"hns-endpoints.json", `"IPAddress": "` + iis.Status.PodIP + `"`},
		{"cni.log", "ADD default/iis: address " + iis.Status.PodIP},
	} {
		file, want := c[0], c[1]
		b, err := os.ReadFile(filepath.Join(logDir, file))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %v, want it to contain %q; it has:\n%s", file, err, want, b)
		}
	}

	// RDP: refused for Linux; for Windows the tunnel reaches port 3389 of
	// the node's address, where this test listens as Remote Desktop would.
	if _, _, err := winkube(ctx, append([]string{"rdp", linuxNode}, local...)...); err == nil || !strings.Contains(err.Error(), "is a Linux node") {
		t.Fatalf("rdp to a Linux node: %v", err)
	}
	var winHost string
	for _, n := range w.Runtime().Nodes() {
		if n.NodeName == strings.ToLower(win.Status.VMName) {
			winHost = n.Host.String()
		}
	}
	rdpServer, err := net.Listen("tcp", net.JoinHostPort(winHost, "3389"))
	if err != nil {
		t.Fatal(err)
	}
	defer rdpServer.Close()
	go func() {
		for {
			c, err := rdpServer.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("RDP on " + winHost + "\n"))
			_ = c.Close()
		}
	}()
	port := freePort(t)
	rctx, stopRDP := context.WithCancel(ctx)
	rdpDone := make(chan error, 1)
	var rdpOut bytes.Buffer
	go func() {
		root := NewRootCommand()
		root.SetOut(&rdpOut)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{"rdp", win.Name, "--local-port", strconv.Itoa(port)}, local...))
		rdpDone <- root.ExecuteContext(rctx)
	}()
	var greeting string
	poll.Until(t, 30*time.Second, func() string {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return "the tunnel's local port: " + err.Error()
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		if greeting = string(b); greeting == "" {
			return "nothing came through the tunnel"
		}
		return ""
	})
	if strings.TrimSpace(greeting) != "RDP on "+winHost {
		t.Fatalf("through the RDP tunnel: %q, want the listener on the node's address", greeting)
	}
	stopRDP()
	if err := <-rdpDone; err != nil {
		t.Fatalf("rdp after Ctrl-C: %v", err)
	}
	t.Logf("all checks after %s", time.Since(start).Round(time.Second))
}
