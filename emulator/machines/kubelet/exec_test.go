package kubelet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// execIn runs a command in a container through the API server's
// pods/exec, as kubectl exec does, with stdin when given.
func execIn(t *testing.T, n *servingNode, ns, pod, container string, cmd []string, stdin string) (stdout, stderr string, err error) {
	t.Helper()
	return testenv.Exec(context.Background(), n.cfg, n.client, ns, pod, container, cmd, stdin)
}

// exitCode is the command's exit status as client-go reports it.
func exitCode(err error) int {
	var ee interface{ ExitStatus() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitStatus()
	}
	return -1
}

// execLinux: sh in a busybox pod sees its environment and hostname; what
// one container writes to the pod's emptyDir the other reads, and it is
// on the node's disk where the kubelet keeps the volume; a program the
// image lacks is runc's start error; the notice comes once per session.
func execLinux(t *testing.T, n *servingNode) {
	ctx := context.Background()
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bb := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "docker.io/library/busybox:1.36",
			Env: []corev1.EnvVar{
				{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
				{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				{Name: "CPU_MILLIS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resourceMustParse("1m")}}},
			},
			Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resourceMustParse("250m")}},
			VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}}}
	}
	pod := n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shell", Labels: map[string]string{"app": "shop"}}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{bb("a"), bb("b")},
		Volumes:    []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}})
	out, errs, err := execIn(t, n, "default", "shell", "a", []string{"sh", "-c", "hostname; echo $PASSWORD $HOSTNAME; echo written-by-a > /cache/note"}, "")
	if err != nil || out != "shell\ns3cret shell\n" {
		t.Fatalf("exec in a: %v %q %q", err, out, errs)
	}
	if strings.Count(errs, "winkube: sh in container a of pod default/shell is winkube's simulated shell") != 1 || !strings.Contains(errs, "no application process runs") {
		t.Errorf("notice: %q", errs)
	}
	// The downward API and the Service links, as the kubelet sets them.
	out, _, err = execIn(t, n, "default", "shell", "a", []string{"printenv", "APP", "CPU_MILLIS", "WEB_SVC_SERVICE_PORT_HTTP", "WEB_SVC_PORT_8080_TCP_PROTO"}, "")
	if err != nil || out != "shop\n250\n8080\ntcp\n" {
		t.Errorf("printenv: %v %q", err, out)
	}
	// Without service links only the kubernetes Service's variables.
	n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nolinks"}, Spec: corev1.PodSpec{EnableServiceLinks: ptr.To(false),
		Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36"}}}})
	out, _, err = execIn(t, n, "default", "nolinks", "c", []string{"env"}, "")
	if err != nil || strings.Contains(out, "WEB_SVC_") || !strings.Contains(out, "KUBERNETES_SERVICE_HOST=") {
		t.Errorf("env without service links: %v %q", err, out)
	}
	if out, _, err := execIn(t, n, "default", "shell", "b", []string{"cat", "/cache/note"}, ""); err != nil || out != "written-by-a\n" {
		t.Errorf("b reads the emptyDir: %v %q", err, out)
	}
	onDisk := filepath.Join(n.disk.Root, "var/lib/kubelet/pods", string(pod.UID), "volumes/kubernetes.io~empty-dir/cache/note")
	if data, err := os.ReadFile(onDisk); err != nil || string(data) != "written-by-a\n" {
		t.Errorf("the node's disk at %s: %v %q", onDisk, err, data)
	}
	// An interactive session: the notice once, however many commands.
	out, errs, err = execIn(t, n, "default", "shell", "a", []string{"sh"}, "ls /cache\ncurl http://x\nexit 3\n")
	if exitCode(err) != 3 || out != "note\n" || strings.Count(errs, "winkube:") != 1 || !strings.Contains(errs, "sh: curl: not found") {
		t.Errorf("session: %v %q %q", err, out, errs)
	}
	_, _, err = execIn(t, n, "default", "shell", "a", []string{"bash"}, "")
	if err == nil || !strings.Contains(err.Error(), `exec: "bash": executable file not found in $PATH: unknown`) {
		t.Errorf("bash in busybox: %v", err)
	}
	// attach has no process to join: refused in plain words.
	req := n.client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("shell").SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "a", Stdout: true}, scheme.ParameterCodec)
	att, err := remotecommand.NewSPDYExecutor(n.cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	if err := att.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil || !strings.Contains(err.Error(), "run no application process: attach is not available") {
		t.Errorf("attach: %v", err)
	}
	// The pod's directory goes with the pod.
	if err := n.client.CoreV1().Pods("default").Delete(ctx, "shell", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := os.Stat(filepath.Dir(onDisk)); err == nil {
			return "the emptyDir is still on the node's disk"
		}
		return ""
	})
}

// portForwardToPod: kubectl port-forward to a pod's declared port reaches
// its simulated listener; to a port nothing serves, containerd's error
// comes back on the error stream.
func portForwardToPod(t *testing.T, n *servingNode) {
	n.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pf"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "docker.io/library/busybox:1.36", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
	}}}})
	resp, body, err := testenv.Get(n.cfg, n.client, "default", "pf", 8080, "/through/forward")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(SimulatedHeader) != "true" || !strings.Contains(string(body), "default/pf") || !strings.Contains(string(body), "GET /through/forward") {
		t.Errorf("forwarded answer %v %q", resp.Header, body)
	}
	dialer, err := testenv.PortForwardDialer(n.cfg, n.client, "default", "pf")
	if err != nil {
		t.Fatal(err)
	}

	// Port 9090: the streams client-go opens for a connection, read
	// directly so that the error is seen as the kubelet sent it.
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, "9090")
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	_ = errStream.Close()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	msg, _ := io.ReadAll(errStream)
	if !strings.Contains(string(msg), "failed to execute portforward in network namespace \"/var/run/netns/cni-") ||
		!strings.Contains(string(msg), "failed to connect to localhost:9090 inside namespace") || !strings.Contains(string(msg), "connect: connection refused") {
		t.Errorf("undeclared port: %q", msg)
	}
}

// execWindows is seed 003's pod on a Windows Server 2022 node: a Secret
// as an environment variable, a ConfigMap at "C:\\etc\\foo", a Secret at
// "C:/etc/bar", emptyDirs at "/cache" and "C:/scratch", two containers;
// and a Nano Server pod, which has no PowerShell.
func execWindows(t *testing.T, n *servingNode) {
	ctx := context.Background()
	win := startWindowsNode(t, n)
	if _, err := n.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foo"}, Data: map[string]string{"key": "from-configmap"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bar"}, StringData: map[string]string{"username": "admin"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mounts := []corev1.VolumeMount{{Name: "foo", MountPath: `C:\etc\foo`}, {Name: "bar", MountPath: "C:/etc/bar"}, {Name: "cache", MountPath: "/cache"}, {Name: "scratch", MountPath: "C:/scratch"}}
	ctr := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "mcr.microsoft.com/windows/servercore:ltsc2022", VolumeMounts: mounts,
			Env: []corev1.EnvVar{{Name: "USERNAME_FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "bar"}, Key: "username"}}}}}
	}
	win.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seed003"}, Spec: corev1.PodSpec{
		Hostname:   "web-0",
		Containers: []corev1.Container{ctr("one"), ctr("two")},
		Volumes: []corev1.Volume{
			{Name: "foo", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "foo"}}}},
			{Name: "bar", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "bar"}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}})
	cases := []struct {
		cmd  []string
		want string
	}{
		{[]string{"hostname"}, "web-0\n"},
		{[]string{"cmd", "/c", `type C:\etc\foo\key`}, "from-configmap"},
		{[]string{"cmd", "/c", "echo %USERNAME_FROM_SECRET%"}, "admin\n"},
		{[]string{"powershell", "-Command", "Get-Content /etc/bar/username"}, "admin\n"},
		{[]string{"powershell", "-Command", "$env:USERNAME_FROM_SECRET"}, "admin\n"},
	}
	for _, c := range cases {
		out, errs, err := execIn(t, win, "default", "seed003", "one", c.cmd, "")
		if err != nil || out != c.want {
			t.Errorf("%q: %v %q (stderr %q), want %q", c.cmd, err, out, errs, c.want)
		}
	}
	// Written through one spelling in one container, read through the
	// other in a later exec and in the other container.
	if _, errs, err := execIn(t, win, "default", "seed003", "one", []string{"cmd", "/c", `echo cached> C:\cache\a.txt`}, ""); err != nil {
		t.Fatalf("write: %v %q", err, errs)
	}
	if _, errs, err := execIn(t, win, "default", "seed003", "one", []string{"powershell", "-Command", `Set-Content -Path /scratch/b.txt -Value scratched`}, ""); err != nil {
		t.Fatalf("Set-Content: %v %q", err, errs)
	}
	if out, _, err := execIn(t, win, "default", "seed003", "two", []string{"cmd", "/c", `type /cache/a.txt`}, ""); err != nil || out != "cached\r\n" {
		t.Errorf("two reads the cache: %v %q", err, out)
	}
	if out, _, err := execIn(t, win, "default", "seed003", "two", []string{"powershell", "-Command", `Get-ChildItem C:\scratch`}, ""); err != nil || !strings.Contains(out, "b.txt") {
		t.Errorf("two lists the scratch: %v %q", err, out)
	}
	out, errs, err := execIn(t, win, "default", "seed003", "one", []string{"powershell"}, "Get-ChildItem env:\r\nipconfig /all\r\nexit\r\n")
	if !strings.Contains(out, "USERNAME_FROM_SECRET") || strings.Count(errs, "winkube:") != 1 || !strings.Contains(errs, "The term 'ipconfig' is not recognized") {
		t.Errorf("session: %v %q %q", err, out, errs)
	}

	// A HostProcess container is on the host: the node's hostname, the
	// host's disk, and its sandbox mount point.
	win.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hpc"}, Spec: corev1.PodSpec{HostNetwork: true,
		SecurityContext: &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\SYSTEM`)}},
		Containers:      []corev1.Container{{Name: "hpc", Image: "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0"}}}})
	if err := os.MkdirAll(filepath.Join(win.disk.Root, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(win.disk.Root, "k", "kubeconfig"), []byte("host-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, err = execIn(t, win, "default", "hpc", "hpc", []string{"powershell", "-Command", `hostname; Get-Content C:\k\kubeconfig; $env:CONTAINER_SANDBOX_MOUNT_POINT`}, "")
	if err != nil || !strings.HasPrefix(out, "win-a\nhost-file\nC:\\") {
		t.Errorf("HostProcess exec: %v %q %q", err, out, errs)
	}

	win.run(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nano"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "nano", Image: "mcr.microsoft.com/windows/nanoserver:ltsc2022",
	}}}})
	_, _, err = execIn(t, win, "default", "nano", "nano", []string{"powershell"}, "")
	if err == nil || !strings.Contains(err.Error(), "hcs::System::CreateProcess ") || !strings.Contains(err.Error(), "The system cannot find the file specified.: unknown") {
		t.Errorf("powershell in nanoserver: %v", err)
	}
	if out, _, err := execIn(t, win, "default", "nano", "nano", []string{"cmd", "/c", "hostname"}, ""); err != nil || out != "nano\n" {
		t.Errorf("cmd in nanoserver: %v %q", err, out)
	}
}

// startWindowsNode runs a Windows Server 2022 kubelet on n's API server.
func startWindowsNode(t *testing.T, n *servingNode) *servingNode {
	t.Helper()
	w := &servingNode{client: n.client, ca: n.ca, cfg: n.cfg, node: "win-a", addr: testAddress(t), pods: map[string]netip.Addr{},
		disk: vmdisk.Disk{Root: t.TempDir(), Windows: true}}
	for i := 2; i < 6; i++ {
		w.pods[netip.AddrFrom4([4]byte{10, 244, 2, byte(i)}).String()] = testAddress(t)
	}
	k, err := Start(context.Background(), Config{
		NodeName: w.node, Client: n.client, ClientCA: n.ca, Address: w.addr, Host: win2022, Images: startRegistry(t),
		NodeInfo:   corev1.NodeSystemInfo{OSImage: "Windows Server 2022 Datacenter", KernelVersion: "10.0.20348.2849", OperatingSystem: "windows"},
		PodAddress: w.podAddress, Log: logr.Discard(), Disk: w.disk,
		NetworkConfigured: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if _, err := n.client.CoreV1().Nodes().Patch(context.Background(), w.node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.2.0/24","podCIDRs":["10.244.2.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// A Windows node's port-forward to a port nothing serves: containerd
// dials the pod IP and names it, with Windows' connection-refused text.
func TestWindowsPortForwardRefused(t *testing.T) {
	addr := testAddress(t) // nothing listens on it
	f := forwarder{addr: addr, windows: true, podIP: "10.244.2.7", sandbox: "sb1"}
	a, b := net.Pipe()
	defer b.Close()
	err := f.PortForward(context.Background(), "web", "uid", 9090, a)
	want := `failed to execute portforward for podId sb1, podIp 10.244.2.7, err: failed to connect to 10.244.2.7:9090 for pod "sb1": dial tcp 10.244.2.7:9090: connectex: No connection could be made because the target machine actively refused it.`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
