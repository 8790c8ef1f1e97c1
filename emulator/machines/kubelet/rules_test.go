package kubelet

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/registry"
)

func startRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	r, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.PushAll(context.Background(), registry.Catalog("v1.36.3", []string{"registry.k8s.io/kube-proxy:v1.36.3"})); err != nil {
		t.Fatal(err)
	}
	return r
}

// pull is a pull on a node that has no image yet: the registry's manifest,
// then the host's rules.
func pull(ctx context.Context, images Images, h Host, ref string, hostProcess bool) (*Pulled, error) {
	m, err := resolve(ctx, images, ref)
	if err != nil {
		return nil, err
	}
	return unpack(m, h, ref, hostProcess)
}

var (
	linux   = Host{OS: "linux", Arch: "amd64"}
	win2019 = Host{OS: "windows", Arch: "amd64", Build: "10.0.17763"}
	win2022 = Host{OS: "windows", Arch: "amd64", Build: "10.0.20348"}
	win2025 = Host{OS: "windows", Arch: "amd64", Build: "10.0.26100"}
)

// TestPullFollowsContainerdPlatformRules checks each image against each
// host the way containerd and HCS decide.
func TestPullFollowsContainerdPlatformRules(t *testing.T) {
	r := startRegistry(t)
	ctx := context.Background()
	const iis = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc"
	cases := []struct {
		host        Host
		image       string
		hostProcess bool
		reason, msg string // empty: runs
		provides    string
	}{
		{host: linux, image: "nginx:1.27"},
		{host: linux, image: "docker.io/calico/node:v3.30.7"},
		{host: win2022, image: iis + "2022"},
		{host: win2019, image: iis + "2019"},
		{host: win2025, image: iis + "2025"},
		{host: win2025, image: iis + "2022"}, // 2025 runs 2022 images
		{host: win2022, image: iis + "2019", reason: "CreateContainerError", msg: "The container operating system does not match the host operating system"},
		{host: win2022, image: iis + "2025", reason: "CreateContainerError", msg: "does not match the host"},
		{host: win2019, image: iis + "2022", reason: "CreateContainerError", msg: "does not match the host"},
		{host: win2022, image: "mcr.microsoft.com/windows/servercore/iis:latest"}, // index picks the build
		{host: win2022, image: "nginx:1.27", reason: "ErrImagePull", msg: "no match for platform in manifest"},
		{host: linux, image: iis + "2022", reason: "ErrImagePull", msg: "no match for platform in manifest"},
		{host: win2025, image: "docker.io/calico/cni-windows:v3.30.7"}, // its 2022 entry
		{host: win2025, image: iis + "2019", reason: "CreateContainerError", msg: "does not match the host"},
		{host: win2019, image: "docker.io/sigwindowstools/kube-proxy:v1.36.3-calico-hostprocess", hostProcess: true, provides: "kube-proxy"},
		{host: linux, image: "docker.io/library/nginx:9.9", reason: "ErrImagePull", msg: `docker.io/library/nginx:9.9: not found`},
	}
	for _, c := range cases {
		p, err := pull(ctx, r, c.host, c.image, c.hostProcess)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%s on %s %s: %v, want it to run", c.image, c.host.OS, c.host.Build, err)
			} else if p.Provides != c.provides || !strings.Contains(p.ImageID, "@sha256:") {
				t.Errorf("%s: provides %q, image ID %q", c.image, p.Provides, p.ImageID)
			}
			continue
		}
		f, ok := err.(*ContainerFailure)
		if !ok || f.Reason != c.reason || !strings.Contains(f.Message, c.msg) {
			t.Errorf("%s on %s %s: %v, want %s (%s)", c.image, c.host.OS, c.host.Build, err, c.reason, c.msg)
		}
	}
}

// TestAdmitRefusesWhatWindowsCannotRun: a Windows kubelet refuses little
// (the OS field and label, pod-level resources) and runs the rest with
// what Windows cannot do left out.
func TestAdmitRefusesWhatWindowsCannotRun(t *testing.T) {
	c := corev1.Container{Name: "c", Image: "x"}
	hp := &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}
	cases := []struct {
		name   string
		host   Host
		spec   corev1.PodSpec
		refuse string
	}{
		{"plain", win2022, corev1.PodSpec{Containers: []corev1.Container{c}}, ""},
		{"host process", win2022, corev1.PodSpec{HostNetwork: true, SecurityContext: hp, Containers: []corev1.Container{c}}, ""},
		// The kubelet and containerd ignore these on Windows: they run.
		{"host network", win2022, corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{c}}, ""},
		{"privileged", win2022, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}, ""},
		{"runAsUser", win2022, corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}, Containers: []corev1.Container{c}}, ""},
		{"capabilities", win2022, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}}}}, ""},
		{"pod-level resources", win2022, corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resourceMustParse("1")}}, Containers: []corev1.Container{c}}, "pod-level resources are not supported on Windows"},
		// v0.36.3 counts pod-level huge pages as pod-level resources.
		{"pod-level huge pages", win2022, corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"hugepages-2Mi": resourceMustParse("2Mi")}}, Containers: []corev1.Container{c}}, "pod-level resources are not supported on Windows"},
		{"pod-level resources on linux", linux, corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resourceMustParse("1")}}, Containers: []corev1.Container{c}}, ""},
		{"linux pod on windows", win2022, corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Linux}, Containers: []corev1.Container{c}}, "doesn't match node OS"},
		{"windows pod on linux", linux, corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Windows}, Containers: []corev1.Container{c}}, "doesn't match node OS"},
		{"os label", win2022, corev1.PodSpec{Containers: []corev1.Container{c}}, ""},
		{"privileged on linux", linux, corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}, ""},
	}
	for _, tc := range cases {
		rej := admit(tc.host, &corev1.Pod{Spec: tc.spec})
		if tc.name == "pod-level resources" && (rej == nil || rej.Reason != "PodLevelResourcesNotSupported") {
			t.Errorf("%s: reason %+v, want PodLevelResourcesNotSupported", tc.name, rej)
		}
		switch {
		case tc.refuse == "" && rej != nil:
			t.Errorf("%s: refused (%s), want admitted", tc.name, rej.Message)
		case tc.refuse != "" && (rej == nil || !strings.Contains(rej.Message, tc.refuse)):
			t.Errorf("%s: %+v, want a refusal saying %q", tc.name, rej, tc.refuse)
		}
	}
}

func TestRegistryKeepsPlatforms(t *testing.T) {
	r := startRegistry(t)
	m, err := r.Lookup(context.Background(), "mcr.microsoft.com/windows/servercore/iis:latest")
	if err != nil {
		t.Fatal(err)
	}
	var builds []string
	for _, p := range m.Platforms {
		builds = append(builds, p.OSVersion)
	}
	if len(builds) != 3 || builds[0] != registry.Build2019 || builds[2] != registry.Build2025 {
		t.Errorf("iis:latest platforms %v", builds)
	}
	if err := r.Push(context.Background(), registry.Image{Ref: "example.com/x:1", Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(context.Background(), "example.com/x:2"); err != registry.ErrNotFound {
		t.Errorf("a missing tag: %v, want ErrNotFound", err)
	}
}

// TestHostProcessFollowsTheKubeletsFlags: HostProcess pods need a kubelet
// that knows them (v1.22+), its feature gate (off by default on v1.22,
// on by default v1.23-v1.25, GA from v1.26) and containerd.
func TestHostProcessFollowsTheKubeletsFlags(t *testing.T) {
	hp := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, OS: &corev1.PodOS{Name: "windows"},
		SecurityContext: &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}},
		Containers:      []corev1.Container{{Name: "kube-proxy", Image: "docker.io/sigwindowstools/kube-proxy:v1.24.3-calico-hostprocess"}}}}
	host := func(version, runtime string, gates map[string]bool) Host {
		h := win2022
		h.KubeletVersion, h.Runtime, h.FeatureGates = version, runtime, gates
		return h
	}
	on, off := map[string]bool{hostProcessGate: true}, map[string]bool{hostProcessGate: false}
	cases := []struct {
		name      string
		h         Host
		admit     string // rejection text, "" admits
		sandbox   string // sandbox error text, "" creates it
		knowsHost bool
	}{
		{name: "v1.21 does not know hostProcess", h: host("v1.21.14", "containerd", on), admit: "kubelet v1.21.14 does not know securityContext.windowsOptions.hostProcess"},
		{name: "v1.22 without the gate", h: host("v1.22.17", "containerd", nil), sandbox: "feature 'WindowsHostProcessContainers' is not enabled", knowsHost: true},
		{name: "v1.22 with the gate", h: host("v1.22.17", "containerd", on), knowsHost: true},
		{name: "v1.24 with the gate off", h: host("v1.24.17", "containerd", off), sandbox: "feature 'WindowsHostProcessContainers' is not enabled", knowsHost: true},
		{name: "v1.24 by default", h: host("v1.24.17", "containerd", nil), knowsHost: true},
		{name: "v1.23 on dockershim", h: host("v1.23.17", "dockershim", on), sandbox: "dockershim does not run Windows HostProcess containers", knowsHost: true},
		{name: "v1.36", h: host("v1.36.3", "containerd", nil), knowsHost: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rej := admit(c.h, hp)
			switch {
			case c.admit == "" && rej != nil:
				t.Fatalf("refused: %+v", rej)
			case c.admit != "" && (rej == nil || !strings.Contains(rej.Message, c.admit)):
				t.Fatalf("admission %+v, want %q", rej, c.admit)
			}
			if c.h.knowsHostProcess() != c.knowsHost {
				t.Errorf("knows hostProcess: %v", !c.knowsHost)
			}
			if !c.knowsHost {
				return
			}
			err := c.h.hostProcessSandbox()
			switch {
			case c.sandbox == "" && err != nil:
				t.Fatalf("sandbox: %v", err)
			case c.sandbox != "" && (err == nil || !strings.Contains(err.Error(), c.sandbox)):
				t.Fatalf("sandbox error %v, want %q", err, c.sandbox)
			}
		})
	}
}

// TestImagesSayWhereTheyListen: a pull learns the ports the image's
// process serves, which probes are answered on.
func TestImagesSayWhereTheyListen(t *testing.T) {
	r := startRegistry(t)
	for ref, port := range map[string]int32{"nginx:1.27": 80, "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022": 80, "docker.io/calico/node:v3.30.7": 9099} {
		h := linux
		if strings.Contains(ref, "windows") {
			h = win2022
		}
		p, err := pull(context.Background(), r, h, ref, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := portsOf(corev1.Container{}, p); len(got) != 1 || got[0] != port {
			t.Errorf("%s listens on %v, want %d only", ref, p.Listens, port)
		}
	}
	p, err := pull(context.Background(), r, linux, "docker.io/library/busybox:1.36", false)
	if err != nil || len(p.Listens) != 0 {
		t.Errorf("busybox listens on %v (%v)", p, err)
	}
}

// TestUnreachableRegistry: without a way to the internet a pull fails as
// containerd's does when the registry's port never answers.
func TestUnreachableRegistry(t *testing.T) {
	for ref, want := range map[string]string{
		"nginx": `failed to pull and unpack image "docker.io/library/nginx:latest": failed to resolve reference "docker.io/library/nginx:latest": ` +
			`failed to do request: Head "https://registry-1.docker.io/v2/library/nginx/manifests/latest": dial tcp ` + publicAddress("registry-1.docker.io") + `:443: i/o timeout`,
		"registry.k8s.io/pause:3.10": `failed to pull and unpack image "registry.k8s.io/pause:3.10": failed to resolve reference "registry.k8s.io/pause:3.10": ` +
			`failed to do request: Head "https://registry.k8s.io/v2/pause/manifests/3.10": dial tcp ` + publicAddress("registry.k8s.io") + `:443: i/o timeout`,
	} {
		f := unreachableRegistry(ref)
		if f.Reason != "ErrImagePull" || f.Message != want {
			t.Errorf("%s: %s: %s\nwant ErrImagePull: %s", ref, f.Reason, f.Message, want)
		}
	}
	if a := publicAddress("mcr.microsoft.com"); !strings.HasPrefix(a, "203.0.113.") || a != publicAddress("mcr.microsoft.com") {
		t.Errorf("publicAddress = %s, want a stable address in 203.0.113.0/24", a)
	}
}

// TestOSLabelIsAdmitted: the kubelet compares the pod's own
// kubernetes.io/os label, not its nodeSelector, with the node's OS.
func TestOSLabelIsAdmitted(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelOSStable: "linux"}, Containers: []corev1.Container{{Name: "c"}}}}
	if rej := admit(win2022, pod); rej != nil {
		t.Errorf("a nodeSelector alone: %+v, want admitted (the scheduler, not the kubelet, reads it)", rej)
	}
	pod.Labels = map[string]string{corev1.LabelOSStable: "linux"}
	if rej := admit(win2022, pod); rej == nil || rej.Reason != "PodOSSelectorNodeLabelDoesNotMatch" {
		t.Errorf("a kubernetes.io/os=linux label on Windows: %+v", rej)
	}
}

// TestIgnoredOnWindows: what the Windows kubelet logs of the Linux-only
// settings it drops, only when runAsNonRoot is set; and a raw block
// device fails the container's creation in containerd.
func TestIgnoredOnWindows(t *testing.T) {
	c := corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000), SELinuxOptions: &corev1.SELinuxOptions{Level: "s0"}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	if got := ignoredOnWindows(pod, c); len(got) != 0 {
		t.Errorf("without runAsNonRoot: %q, want nothing logged", got)
	}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	got := ignoredOnWindows(pod, c)
	if len(got) != 2 || !strings.Contains(got[0], "RunAsUser") || !strings.Contains(got[1], "SELinuxOptions") {
		t.Errorf("with runAsNonRoot: %q", got)
	}
	block := corev1.Container{Name: "b", VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}}
	if f := createsOnWindows(win2022, pod, block); f == nil || f.Reason != "CreateContainerError" || !strings.Contains(f.Message, "unexpected ContainerPath /dev/xvda, must be empty") {
		t.Errorf("volumeDevices on Windows: %+v", f)
	}
	if f := createsOnWindows(linux, pod, block); f != nil {
		t.Errorf("volumeDevices on Linux: %+v", f)
	}
}

// TestNonRootRefusesContainerAdministrator: runAsNonRoot with the Windows
// root user named (any case, on the pod or the container) is refused before
// the container is made, with the kubelet's message; another user runs.
func TestNonRootRefusesContainerAdministrator(t *testing.T) {
	for _, user := range []string{"ContainerAdministrator", "CONTAINERADMINISTRATOR"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), WindowsOptions: &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To(user)}},
			Containers:      []corev1.Container{{Name: "c"}}}}
		f := createsOnWindows(win2022, pod, pod.Spec.Containers[0])
		if f == nil || f.Reason != "CreateContainerConfigError" || !strings.Contains(f.Message, "container's runAsUserName ("+user+") which will be regarded as root identity and will break non-root policy") {
			t.Errorf("%s with runAsNonRoot: %+v", user, f)
		}
		c := corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To("ContainerUser")}}}
		if f := createsOnWindows(win2022, pod, c); f != nil {
			t.Errorf("the container's ContainerUser overrides the pod's %s: %+v", user, f)
		}
		pod.Spec.SecurityContext.RunAsNonRoot = nil
		if f := createsOnWindows(win2022, pod, pod.Spec.Containers[0]); f != nil {
			t.Errorf("%s without runAsNonRoot: %+v", user, f)
		}
	}
}

// TestPullLoadedImage: an image a user loaded ('winkube image load', a
// docker save tarball of a Windows Server 2022 build) is pulled as any
// catalog image: it runs on a 2022 host with its config's process, a 2019
// host refuses it with HCS's error, a Linux host finds no platform.
func TestPullLoadedImage(t *testing.T) {
	ctx := context.Background()
	r := startRegistry(t)
	sock := filepath.Join(t.TempDir(), registry.PushSocket)
	if err := r.ServePush(sock); err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.OSVersion = "windows", "amd64", registry.Build2022
	cfg.Config.Entrypoint, cfg.Config.WorkingDir = []string{`C:\app\app.exe`}, `C:\app`
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	const ref = "example.com/team/app:1"
	tag, _ := name.NewTag(ref)
	saved := filepath.Join(t.TempDir(), "app.tar")
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	imgs, cleanup, err := registry.ReadImages(saved, "")
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.NewPusher(r.Host(), sock).Push(ctx, imgs[0], nil); err != nil {
		t.Fatal(err)
	}
	p, err := pull(ctx, r, win2022, ref, false)
	if err != nil {
		t.Fatalf("on 2022: %v", err)
	}
	if d, _ := img.Digest(); p.ImageID != "example.com/team/app@"+d.String() || p.Process == nil || p.Process.WorkingDir != `C:\app` {
		t.Errorf("on 2022: image %s process %+v", p.ImageID, p.Process)
	}
	for _, c := range []struct {
		host Host
		want string
	}{
		{win2019, "CreateContainerError: failed to create containerd task: failed to create shim task: hcs::CreateComputeSystem: The container operating system does not match the host operating system.: unknown"},
		{linux, `ErrImagePull: failed to pull and unpack image "example.com/team/app:1": no match for platform in manifest: not found`},
	} {
		if _, err := pull(ctx, r, c.host, ref, false); err == nil || err.Error() != c.want {
			t.Errorf("on %s %s: %v, want %s", c.host.OS, c.host.Build, err, c.want)
		}
	}
}
