package workload_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/winkube/winkube/internal/testenv"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

var (
	env     *testenv.Env
	reg     *httptest.Server
	regHost string
	adm     *workload.Admission
)

// The test images: real manifests and configs with the platforms of
// Windows Server 2019/2022/2025, Linux, and a multi-platform index.
var (
	img2019, img2022, img2025, imgLinux, imgMulti string
	// The seeds' IIS tags, and a manifest list of every Windows build (as
	// iis:latest is on mcr.microsoft.com).
	imgCore2019, imgCore2022, imgWinAll string
	// imgHostProcess is the HostProcess base image: Windows, no build.
	imgHostProcess string
)

func pushImage(ref string, plats ...v1.Platform) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	build := func(p v1.Platform) (v1.Image, error) {
		img, err := random.Image(64, 1)
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.OSVersion, cf.Architecture = p.OS, p.OSVersion, p.Architecture
		return mutate.ConfigFile(img, cf)
	}
	if len(plats) == 1 {
		img, err := build(plats[0])
		if err != nil {
			return err
		}
		return remote.Write(r, img)
	}
	var idx v1.ImageIndex = empty.Index
	for _, p := range plats {
		img, err := build(p)
		if err != nil {
			return err
		}
		p := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return remote.WriteIndex(r, idx)
}

func TestMain(m *testing.M) {
	reg = httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	regHost = strings.TrimPrefix(reg.URL, "http://")
	img2019, img2022, img2025 = regHost+"/windows/servercore/iis:ltsc2019", regHost+"/windows/servercore/iis:ltsc2022", regHost+"/windows/servercore/iis:ltsc2025"
	imgLinux, imgMulti = regHost+"/library/nginx:1.27", regHost+"/pause:3.10"
	iis := regHost + "/windows/servercore/iis:"
	imgCore2019, imgCore2022, imgWinAll = iis+"windowsservercore-ltsc2019", iis+"windowsservercore-ltsc2022", iis+"latest"
	imgHostProcess = regHost + "/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0"
	for ref, plats := range map[string][]v1.Platform{
		img2019:        {{OS: "windows", OSVersion: "10.0.17763.6532", Architecture: "amd64"}},
		img2022:        {{OS: "windows", OSVersion: "10.0.20348.2849", Architecture: "amd64"}},
		img2025:        {{OS: "windows", OSVersion: "10.0.26100.2314", Architecture: "amd64"}},
		imgLinux:       {{OS: "linux", Architecture: "amd64"}},
		imgMulti:       {{OS: "linux", Architecture: "amd64"}, {OS: "windows", OSVersion: "10.0.20348.2849", Architecture: "amd64"}},
		imgCore2019:    {{OS: "windows", OSVersion: "10.0.17763.6532", Architecture: "amd64"}},
		imgHostProcess: {{OS: "windows", Architecture: "amd64"}},
		imgCore2022:    {{OS: "windows", OSVersion: "10.0.20348.2849", Architecture: "amd64"}},
		imgWinAll: {{OS: "windows", OSVersion: "10.0.17763.6532", Architecture: "amd64"},
			{OS: "windows", OSVersion: "10.0.20348.2849", Architecture: "amd64"}, {OS: "windows", OSVersion: "10.0.26100.2314", Architecture: "amd64"}},
	} {
		if err := pushImage(ref, plats...); err != nil {
			fmt.Fprintln(os.Stderr, "pushing test images:", err)
			os.Exit(1)
		}
	}
	m2, v2 := workload.Configurations(admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "winkube-admission", Namespace: "winkube-system"}})
	opts := testenv.Options{WebhookInstallOptions: envtest.WebhookInstallOptions{
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{m2}, ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{v2},
	}}
	code := testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		r := workload.NewResolver()
		r.Insecure = []string{regHost}
		adm = workload.New(r, nil)
		if err := e.ServeWebhooks(func(mgr ctrl.Manager) error {
			adm.Reader = mgr.GetAPIReader()
			s := mgr.GetWebhookServer()
			s.Register(workload.MutatePath, &webhook.Admission{Handler: adm.Mutate()})
			s.Register(workload.ValidatePath, &webhook.Admission{Handler: adm.Validate()})
			s.Register(workload.ServicesPath, &webhook.Admission{Handler: adm.Services()})
			return nil
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	})
	reg.Close()
	os.Exit(code)
}

func namespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wl-", Labels: labels}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func pod(ns string, images ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns}}
	for i, img := range images {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	return p
}

func buildAffinity(p *corev1.PodSpec) string {
	if p.Affinity == nil || p.Affinity.NodeAffinity == nil || p.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	var out []string
	for _, t := range p.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == workload.WindowsBuildLabel {
				out = append(out, strings.Join(e.Values, ","))
			}
		}
	}
	return strings.Join(out, ";")
}

func TestPlacementByImages(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	for _, tc := range []struct {
		name   string
		images []string
		os     string
		builds string
		osName corev1.OSName
	}{
		{"2019 image", []string{img2019}, "windows", "10.0.17763", corev1.Windows},
		{"2022 image runs on 2022 and 2025 hosts", []string{img2022}, "windows", "10.0.20348,10.0.26100", corev1.Windows},
		{"2025 image", []string{img2025}, "windows", "10.0.26100", corev1.Windows},
		{"2022 and 2025 images share 2025 hosts", []string{img2022, img2025}, "windows", "10.0.26100", corev1.Windows},
		{"Linux image", []string{imgLinux}, "linux", "", ""},
		{"multi-platform image is left free", []string{imgMulti}, "", "", ""},
		{"Linux and multi-platform", []string{imgLinux, imgMulti}, "linux", "", ""},
	} {
		p := pod(ns, tc.images...)
		if err := env.Client.Create(ctx, p); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := p.Spec.NodeSelector[corev1.LabelOSStable]; got != tc.os {
			t.Errorf("%s: nodeSelector os %q, want %q", tc.name, got, tc.os)
		}
		if got := buildAffinity(&p.Spec); got != tc.builds {
			t.Errorf("%s: windows-build affinity %q, want %q", tc.name, got, tc.builds)
		}
		if (p.Spec.OS == nil && tc.osName != "") || (p.Spec.OS != nil && p.Spec.OS.Name != tc.osName) {
			t.Errorf("%s: spec.os %+v, want %q", tc.name, p.Spec.OS, tc.osName)
		}
	}
}

// TestAnyBuildIsPlacedOnWindowsOnly: an image whose Windows platform names
// no build (the HostProcess base image), and any image of a HostProcess
// pod, runs on every Windows build: the pod goes to Windows nodes with no
// build affinity, and a user's build selector is kept.
func TestAnyBuildIsPlacedOnWindowsOnly(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	hostProcess := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.HostNetwork = true
		p.Spec.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{
			HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\SYSTEM`)}}
		return p
	}
	selected := pod(ns, imgHostProcess)
	selected.Spec.NodeSelector = map[string]string{workload.WindowsBuildLabel: "10.0.17763"}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		build string
	}{
		{"base image naming no build", pod(ns, imgHostProcess), ""},
		{"base image, HostProcess", hostProcess(pod(ns, imgHostProcess)), ""},
		{"2019 image of a HostProcess pod", hostProcess(pod(ns, img2019)), ""},
		{"a user's build selector is kept", selected, "10.0.17763"},
	} {
		if err := env.Client.Create(ctx, tc.pod); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		p := tc.pod
		if p.Spec.NodeSelector[corev1.LabelOSStable] != "windows" || p.Spec.OS == nil || p.Spec.OS.Name != corev1.Windows ||
			p.Spec.Affinity != nil || p.Spec.NodeSelector[workload.WindowsBuildLabel] != tc.build {
			t.Errorf("%s: nodeSelector %v, os %+v, affinity %+v; want Windows, no build affinity, build selector %q", tc.name, p.Spec.NodeSelector, p.Spec.OS, p.Spec.Affinity, tc.build)
		}
	}
}

func TestImagesThatCannotShareANodeAreRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	err := env.Client.Create(ctx, pod(ns, img2019, img2022))
	if err == nil || !strings.Contains(err.Error(), "no Windows build runs all of these images") {
		t.Fatalf("2019 + 2022 images: %v", err)
	}
	err = env.Client.Create(ctx, pod(ns, img2022, imgLinux))
	if err == nil || !strings.Contains(err.Error(), "split them into separate pods") {
		t.Fatalf("Windows + Linux images: %v", err)
	}
}

func TestUserSelectorsAreKeptOrContradictionsRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	// A matching selector stays, and the user's build choice is kept.
	p := pod(ns, img2022)
	p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "windows", workload.WindowsBuildLabel: "10.0.26100"}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeSelector[workload.WindowsBuildLabel] != "10.0.26100" || buildAffinity(&p.Spec) != "" {
		t.Fatalf("the user's build selector was overridden: %v, affinity %q", p.Spec.NodeSelector, buildAffinity(&p.Spec))
	}
	// A contradicting one is refused, naming the field.
	p = pod(ns, img2019)
	p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	err := env.Client.Create(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "spec.nodeSelector[kubernetes.io/os]") || !strings.Contains(err.Error(), "only on windows") {
		t.Fatalf("linux selector on a Windows image: %v", err)
	}
	p = pod(ns, img2019)
	p.Spec.NodeSelector = map[string]string{workload.WindowsBuildLabel: "10.0.20348"}
	err = env.Client.Create(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "The container operating system does not match the host operating system") {
		t.Fatalf("2022 build selector on a 2019 image: %v", err)
	}
}

func TestWorkloadTemplatesArePlaced(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	labels := map[string]string{"app": "iis"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "iis", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod(ns, img2019).Spec},
		},
	}
	if err := env.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable] != "windows" || buildAffinity(&d.Spec.Template.Spec) != "10.0.17763" {
		t.Fatalf("Deployment template not placed: %+v", d.Spec.Template.Spec.NodeSelector)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod(ns, imgLinux).Spec},
		},
	}
	if err := env.Client.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if ds.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable] != "linux" {
		t.Fatal("a Linux DaemonSet was not kept off Windows nodes")
	}
}

func TestNamespaceOptOut(t *testing.T) {
	ns := namespace(t, map[string]string{workload.OptOutLabel: "disabled"})
	p := pod(ns, img2019)
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.NodeSelector) != 0 {
		t.Fatalf("an opted-out namespace's pod was placed: %v", p.Spec.NodeSelector)
	}
}

func TestWindowsLimitsAreRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string
	}{
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "spec.hostNetwork"},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "spec.hostPID"},
		{"privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, "privileged"},
		{"emptyDir in memory", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "m", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		}, "spec.volumes[0].emptyDir.medium"},
		// What the Windows kubelet rejects, or no Windows node offers.
		{"pod-level resources", func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		}, "spec.resources: Forbidden"},
		{"huge pages", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("2Mi")}}
		}, "spec.containers[0].resources: Forbidden"},
		{"os label", func(p *corev1.Pod) { p.Labels = map[string]string{corev1.LabelOSStable: "linux"} }, "metadata.labels[kubernetes.io/os]: Forbidden"},
		{"mixed HostProcess", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "hp", Image: img2019, SecurityContext: &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\system`)}}})
		}, "HostProcess"},
	} {
		p := pod(ns, img2019)
		tc.mutate(p)
		err := env.Client.Create(ctx, p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	// A HostProcess pod (kube-proxy's shape) is fine.
	p := pod(ns, img2019)
	p.Spec.HostNetwork = true
	p.Spec.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\system`)}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("a HostProcess pod was refused: %v", err)
	}
	// So is one whose every container is HostProcess (calico-node-windows's shape).
	p = pod(ns, img2019)
	p.Spec.HostNetwork = true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To(`NT AUTHORITY\system`)}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("a pod of HostProcess containers was refused: %v", err)
	}
}

func TestRegistryFailurePolicy(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	missing := regHost + "/does/not:exist"
	// Open (the default): admitted as it is, with a warning.
	p := pod(ns, missing)
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("fail-open refused the pod: %v", err)
	}
	if len(p.Spec.NodeSelector) != 0 {
		t.Fatal("a pod whose image could not be read was placed")
	}
	adm.FailClosed = true
	defer func() { adm.FailClosed = false }()
	err := env.Client.Create(ctx, pod(ns, missing))
	if err == nil || !strings.Contains(err.Error(), "cannot read the images' platforms") {
		t.Fatalf("fail-closed admitted the pod: %v", err)
	}
	// A registry that is down altogether: the same.
	down := "127.0.0.1:1/library/nginx:1"
	if err := env.Client.Create(ctx, pod(ns, down)); err == nil {
		t.Fatal("fail-closed admitted a pod whose registry is down")
	}
}
