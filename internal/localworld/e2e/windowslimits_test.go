//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// seedSecretName and seedConfigName are seed 003's Secret and ConfigMap.
const (
	seedSecretName = "mysecret"
	seedConfigName = "example-config"
	// noAdmission is a namespace winkube's admission leaves alone, so that
	// what reaches the node is what the node does.
	noAdmission = "on-node"
)

// checkWindowsLimits runs seed 003's Windows examples and seed 002's
// ccauth pod on the world's Windows Server 2022 node, and the Windows
// limits of the README's "Windows limits": once through winkube's
// admission (namespace seeds) and once straight to the node (namespace
// on-node, admission disabled), each with the outcome a real node gives.
func checkWindowsLimits(ctx context.Context, t *testing.T, w *localworld.World, o localworld.Options, start time.Time) {
	t.Helper()
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node.kubernetes.io/windows-build=10.0.20348"})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("the 2022 node: %v (%d)", err, len(nodes.Items))
	}
	node := nodes.Items[0]
	// A 1.36 kubelet still labels the node with the beta OS label the
	// seeds select on.
	if node.Labels["beta.kubernetes.io/os"] != "windows" {
		t.Fatalf("node %s labels %v lack beta.kubernetes.io/os=windows", node.Name, node.Labels)
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "seeds"}},
		{ObjectMeta: metav1.ObjectMeta{Name: noAdmission, Labels: map[string]string{"winkube.dev/admission": "disabled"}}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets(ns.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: seedSecretName},
			StringData: map[string]string{"username": "my-app", "password": "39528$vdg7Jb"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: seedConfigName},
			Data: map[string]string{"example.property.1": "hello", "example.property.2": "world"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	betaWindows := map[string]string{"beta.kubernetes.io/os": "windows"}
	create := func(ns string, p *corev1.Pod) {
		t.Helper()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s/%s: %v", ns, p.Name, err)
		}
	}
	secretEnv := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: seedSecretName}, Key: key}}}
	}

	// Seed 003 as written: its images are of Windows Server 2016, which no
	// node here runs. Admission holds them Pending and says which build
	// they need.
	create("seeds", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mypod-secret"}, Spec: corev1.PodSpec{NodeSelector: betaWindows,
		Containers: []corev1.Container{{Name: "mypod-secret", Image: "redis:3.0-nanoserver", Env: []corev1.EnvVar{secretEnv("USERNAME", "username"), secretEnv("PASSWORD", "password")}}}}})
	create("seeds", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "iis", Labels: map[string]string{"name": "iis"}}, Spec: corev1.PodSpec{NodeSelector: betaWindows,
		Containers: []corev1.Container{{Name: "iis", Image: "microsoft/iis", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}})
	// Seed 003's volumes and environment, on a 2022 image: Secrets and
	// ConfigMaps as variables and as files, hostPath and mount paths
	// written C:\\etc\\foo and C:/etc/..., emptyDirs at /cache and
	// C:/scratch (the second container sees the first one's writes).
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	create("seeds", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seed-volumes"}, Spec: corev1.PodSpec{NodeSelector: betaWindows,
		Containers: []corev1.Container{{Name: "app", Image: "mcr.microsoft.com/windows/servercore:ltsc2022",
			Env:     []corev1.EnvVar{secretEnv("SECRET_USERNAME", "username"), {Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: seedConfigName}}}},
			Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "blah", MountPath: `C:\etc\foo`, ReadOnly: true},
				{Name: "config", MountPath: "C:/etc/config"},
				{Name: "secret", MountPath: "C:/etc/secret"},
				{Name: "cache-volume", MountPath: "/cache"},
				{Name: "scratch-volume", MountPath: "C:/scratch"},
			}},
			{Name: "sidecar", Image: "mcr.microsoft.com/windows/nanoserver:ltsc2022",
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch-volume", MountPath: `C:\scratch`}}}},
		Volumes: []corev1.Volume{
			{Name: "blah", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: `C:\etc\foo`, Type: &dirOrCreate}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: seedConfigName}}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: seedSecretName}}},
			{Name: "cache-volume", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "scratch-volume", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}}})
	// Seed 002's ccauth: an image in no registry, hostPort 80,
	// restartPolicy Never; and `kubectl run ccauth --image=ccaauth`.
	create("seeds", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ccauth"}, Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "ccauth", Image: "ccauth", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}}}}})
	create("seeds", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ccauth-run", Labels: map[string]string{"run": "ccauth"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ccauth", Image: "ccaauth"}}}})

	// Straight to the node.
	win := map[string]string{corev1.LabelOSStable: "windows"}
	servercore := func(name string, f func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeSelector: win,
			Containers: []corev1.Container{{Name: "app", Image: "mcr.microsoft.com/windows/servercore:ltsc2022"}}}}
		f(&p.Spec)
		return p
	}
	create(noAdmission, servercore("redis-old", func(s *corev1.PodSpec) { s.Containers[0].Image = "redis:3.0-nanoserver" }))
	create(noAdmission, servercore("iis-old", func(s *corev1.PodSpec) { s.Containers[0].Image = "microsoft/iis" }))
	create(noAdmission, servercore("hostnet", func(s *corev1.PodSpec) {
		s.HostNetwork = true
		s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	}))
	create(noAdmission, servercore("privileged", func(s *corev1.PodSpec) {
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](1000)}
	}))
	create(noAdmission, servercore("memory-emptydir", func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mem", MountPath: `C:\mem`}}
	}))
	create(noAdmission, servercore("hugepages", func(s *corev1.PodSpec) {
		s.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("64Mi")}}
	}))
	create(noAdmission, servercore("pod-resources", func(s *corev1.PodSpec) {
		s.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	}))
	labelled := servercore("os-label", func(*corev1.PodSpec) {})
	labelled.Labels = map[string]string{corev1.LabelOSStable: "linux"}
	create(noAdmission, labelled)
	// With spec.os.name: windows the API server itself refuses a
	// Linux-only field.
	_, err = cs.CoreV1().Pods(noAdmission).Create(ctx, servercore("os-privileged", func(s *corev1.PodSpec) {
		s.OS = &corev1.PodOS{Name: corev1.Windows}
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.containers[0].securityContext.privileged: Forbidden: cannot be set for a windows pod") {
		t.Errorf("a privileged pod with os.name windows: %v, want the API server's refusal", err)
	}

	// What each came to.
	type outcome func(p *corev1.Pod) string
	waiting := func(reasons []string, text string) outcome {
		return func(p *corev1.Pod) string {
			for _, c := range p.Status.ContainerStatuses {
				if w := c.State.Waiting; w != nil && strings.Contains(w.Message, text) {
					for _, r := range reasons {
						if w.Reason == r {
							if p.Spec.NodeName != node.Name {
								return fmt.Sprintf("on node %q, want %s", p.Spec.NodeName, node.Name)
							}
							return ""
						}
					}
				}
			}
			return fmt.Sprintf("%s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
	}
	runningOn := func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != node.Name {
			return fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName)
		}
		return ""
	}
	failedWith := func(reason, text string) outcome {
		return func(p *corev1.Pod) string {
			if p.Status.Phase != corev1.PodFailed || p.Status.Reason != reason || !strings.Contains(p.Status.Message, text) {
				return fmt.Sprintf("%s %s: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return ""
		}
	}
	event := func(reason, text string) outcome {
		return func(p *corev1.Pod) string {
			if p.Spec.NodeName != "" {
				return "scheduled on " + p.Spec.NodeName + ", want Pending unscheduled"
			}
			evs, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
			if err != nil {
				return err.Error()
			}
			var seen []string
			for _, e := range evs.Items {
				if e.Reason == reason && strings.Contains(e.Message, text) {
					return ""
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
			return fmt.Sprintf("no %s event saying %q: %q", reason, text, seen)
		}
	}
	pullFailed := []string{"ErrImagePull", "ImagePullBackOff"}
	expected := []struct {
		ns, name string
		want     outcome
	}{
		{"seeds", "mypod-secret", event("NoWindowsNodeOfBuild", "10.0.14393")},
		{"seeds", "iis", event("NoWindowsNodeOfBuild", "10.0.14393")},
		{"seeds", "seed-volumes", runningOn},
		{"seeds", "ccauth", waiting(pullFailed, `"docker.io/library/ccauth:latest": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`)},
		{"seeds", "ccauth-run", waiting(pullFailed, `"docker.io/library/ccaauth:latest": pull access denied`)},
		{noAdmission, "redis-old", waiting([]string{"CreateContainerError"}, "The container operating system does not match the host operating system")},
		{noAdmission, "iis-old", waiting(pullFailed, "no match for platform in manifest")},
		{noAdmission, "hostnet", func(p *corev1.Pod) string {
			if s := runningOn(p); s != "" {
				return s
			}
			if p.Status.PodIP != p.Status.HostIP {
				return fmt.Sprintf("pod IP %s, host IP %s: a host-network pod reports the node's", p.Status.PodIP, p.Status.HostIP)
			}
			return ""
		}},
		{noAdmission, "privileged", runningOn},
		{noAdmission, "memory-emptydir", runningOn},
		{noAdmission, "hugepages", event("FailedScheduling", "Insufficient hugepages-2Mi")},
		{noAdmission, "pod-resources", failedWith("PodLevelResourcesNotSupported", "pod-level resources are not supported on Windows")},
		{noAdmission, "os-label", failedWith("PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")},
	}
	poll.Until(t, 2*time.Minute, func() string {
		var wrong []string
		for _, e := range expected {
			p, err := cs.CoreV1().Pods(e.ns).Get(ctx, e.name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if s := e.want(p); s != "" {
				wrong = append(wrong, e.ns+"/"+e.name+": "+s)
			}
		}
		return strings.Join(wrong, "\n")
	})
	t.Logf("%6.1fs seed 002 and 003's examples and the Windows limits end as on a real node", time.Since(start).Seconds())

	checkExecAndPortForward(ctx, t, cfg, cs)
	t.Logf("%6.1fs kubectl exec and port-forward into seed 003's Windows pod", time.Since(start).Seconds())
	checkWindowsServices(ctx, t, cs, o.StateDir, node)
	t.Logf("%6.1fs a Windows node's own NodePort, ClientIP affinity on 2022, and doctor on both", time.Since(start).Seconds())

	// The host-network pod's port is not on the node's address: its
	// process listens in the pod network containerd gave it.
	if s := curlFails(ctx, o.StateDir, node.Name, node.Status.Addresses[0].Address+":8080", 7, "Failed to connect to "+node.Status.Addresses[0].Address+" port 8080"); s != "" {
		t.Errorf("the node reached the host-network pod's port 8080 on its own address: %s", s)
	}

	// Doctor explains each on-node limit.
	out, _ := runWinkube(ctx, "doctor", "--state-dir", o.StateDir, "-o", "json")
	var report struct {
		Findings []struct{ Check, Severity, Object, Message, Fix string }
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &report); err != nil {
		t.Fatalf("doctor's report: %v\n%s", err, out)
	}
	explained := map[string]string{
		"Pod/on-node/hostnet":         "hostNetwork without HostProcess",
		"Pod/on-node/privileged":      "containers[*].securityContext.privileged",
		"Pod/on-node/memory-emptydir": "medium: Memory",
		"Pod/on-node/hugepages":       "no huge pages",
		"Pod/on-node/pod-resources":   "pod-level resources",
		"Pod/on-node/os-label":        "PodOSSelectorNodeLabelDoesNotMatch",
	}
	for obj, text := range explained {
		found := false
		for _, f := range report.Findings {
			found = found || f.Check == "windows-pod-limits" && f.Object == obj && strings.Contains(f.Message, text) && f.Fix != ""
		}
		if !found {
			t.Errorf("doctor does not explain %s (%q)", obj, text)
		}
	}
	// The old images: the OS mismatch on the node, and the seeds' pods
	// admission keeps waiting for a build no node has.
	for _, obj := range []string{"Pod/on-node/redis-old", "Pod/on-node/iis-old", "Pod/seeds/mypod-secret", "Pod/seeds/iis"} {
		found := false
		for _, f := range report.Findings {
			found = found || f.Check == "platform-mismatch" && f.Object == obj
		}
		if !found {
			t.Errorf("doctor does not explain %s's OS mismatch", obj)
		}
	}
}

// checkExecAndPortForward execs into seed-volumes as kubectl exec does
// (the API server's pods/exec, through its egress to the node's kubelet)
// and port-forwards to its declared port.
func checkExecAndPortForward(ctx context.Context, t *testing.T, cfg *rest.Config, cs kubernetes.Interface) {
	t.Helper()
	pod, err := cs.CoreV1().Pods("seeds").Get(ctx, "seed-volumes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(container string, cmd ...string) (string, string, error) {
		return testenv.Exec(ctx, cfg, cs, "seeds", "seed-volumes", container, cmd, "")
	}
	cases := []struct {
		container string
		cmd       []string
		want      string
	}{
		{"app", []string{"hostname"}, "seed-volumes"},
		{"app", []string{"cmd", "/c", "echo %SECRET_USERNAME%"}, "my-app"},
		{"app", []string{"cmd", "/c", "set"}, "example.property.1=hello"},
		{"app", []string{"cmd", "/c", "set"}, "POD_IP=" + pod.Status.PodIP},
		{"app", []string{"cmd", "/c", `type C:\etc\config\example.property.2`}, "world"},
		{"app", []string{"powershell", "-Command", "Get-Content C:/etc/secret/username"}, "my-app"},
		{"app", []string{"powershell", "-Command", "Set-Content -Path /scratch/hello.txt -Value written-by-app"}, ""},
		{"sidecar", []string{"cmd", "/c", `type C:\scratch\hello.txt`}, "written-by-app"},
		{"app", []string{"cmd", "/c", `dir C:\etc\foo`}, ""},
	}
	for _, c := range cases {
		out, errs, err := run(c.container, c.cmd...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("exec %s %q: %v, stdout %q, stderr %q; want %q", c.container, c.cmd, err, out, errs, c.want)
		}
		if !strings.Contains(errs, "no application process runs in the container") {
			t.Errorf("exec %s %q: stderr %q does not say once that no process runs", c.container, c.cmd, errs)
		}
	}
	// Nano Server has no PowerShell: the runtime cannot start it.
	if _, _, err := run("sidecar", "powershell"); err == nil || !strings.Contains(err.Error(), "The system cannot find the file specified") {
		t.Errorf("powershell in a Nano Server container: %v, want hcsshim's CreateProcess error", err)
	}

	// Port-forward to the declared port reaches the container's listener.
	resp, body, err := testenv.Get(cfg, cs, "seeds", "seed-volumes", 8080, "/")
	if err != nil {
		t.Fatalf("port-forward to seed-volumes:8080: %v", err)
	}
	if resp.Header.Get("X-Winkube-Simulated") != "true" || !strings.Contains(string(body), "seeds/seed-volumes") {
		t.Errorf("port-forward to seed-volumes:8080 answered %v %q", resp.Header, body)
	}
}
