package machines_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcp "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/internal/poll"
)

// containerLifecycle: a Job's container runs to completion and the real
// Job controller completes the Job; a readiness probe on a port nothing
// serves keeps a Deployment unavailable while one on the served port
// makes it available; a failing container of a Never pod fails the pod.
func (m *mixed) containerLifecycle(t *testing.T, ctx context.Context, linuxNode string) {
	onLinux := map[string]string{"kubernetes.io/hostname": linuxNode}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "default"}, Spec: batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: onLinux,
			Containers: []corev1.Container{{Name: "work", Image: "docker.io/library/busybox:1.36", Command: []string{"sh", "-c", "echo done"}}}}},
	}}
	if _, err := m.workload.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	probed := func(name string, port int) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{NodeSelector: onLinux,
				Containers: []corev1.Container{{Name: "nginx", Image: "docker.io/library/nginx:1.27", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1}}}}},
		}}
	}
	for _, d := range []*appsv1.Deployment{probed("probed-wrong-port", 8080), probed("probed-right-port", 80)} {
		if _, err := m.workload.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	failing := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fails", Namespace: "default", Labels: map[string]string{"app": "fails"},
		Annotations: map[string]string{kubelet.ExitCodeAnnotation: "2", kubelet.RunSecondsAnnotation: "1"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: onLinux,
			Containers: []corev1.Container{{Name: "c", Image: "docker.io/library/busybox:1.36"}}}}
	if _, err := m.workload.CoreV1().Pods("default").Create(ctx, failing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	poll.Until(t, 2*time.Minute, func() string {
		j, err := m.workload.BatchV1().Jobs("default").Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue && j.Status.Succeeded == 1 {
				return ""
			}
		}
		return fmt.Sprintf("Job once: succeeded %d, conditions %+v", j.Status.Succeeded, j.Status.Conditions)
	})

	m.podOf(t, ctx, "fails", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 {
			return "pod fails is " + string(p.Status.Phase)
		}
		cs := p.Status.ContainerStatuses[0]
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 2 || cs.RestartCount != 0 {
			return fmt.Sprintf("container of pod fails: %+v, %d restarts", cs.State, cs.RestartCount)
		}
		return ""
	})

	// The served port's Deployment becomes available; by then the other's
	// probe has failed again and again and it still is not.
	poll.Until(t, 2*time.Minute, func() string {
		d, err := m.workload.AppsV1().Deployments("default").Get(ctx, "probed-right-port", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if d.Status.AvailableReplicas != 1 {
			return fmt.Sprintf("probed-right-port: %d available", d.Status.AvailableReplicas)
		}
		evs, err := m.workload.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=Unhealthy"})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.InvolvedObject.Name, "probed-wrong-port-") && strings.Contains(e.Message, ":8080/\": dial tcp") && strings.Contains(e.Message, "connection refused") {
				return ""
			}
		}
		return "no Unhealthy event for probed-wrong-port yet"
	})
	// kubeadm's CoreDNS probes its health (8080) and readiness (8181)
	// ports, which its image serves: it becomes Ready.
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := m.workload.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return err.Error()
		}
		if len(pods.Items) == 0 {
			return "no CoreDNS pod"
		}
		for _, p := range pods.Items {
			if !podIsReady(&p) {
				return fmt.Sprintf("CoreDNS pod %s is %s, not Ready", p.Name, p.Status.Phase)
			}
		}
		return ""
	})
	wrong := m.podOf(t, ctx, "probed-wrong-port", running(linuxNode))
	if len(wrong.Status.ContainerStatuses) != 1 || wrong.Status.ContainerStatuses[0].Ready {
		t.Errorf("the container whose probe is refused is ready: %+v", wrong.Status.ContainerStatuses)
	}
	d, err := m.workload.AppsV1().Deployments("default").Get(ctx, "probed-wrong-port", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas != 0 || d.Status.UnavailableReplicas != 1 {
		t.Errorf("probed-wrong-port: %d available, %d unavailable; want none available", d.Status.AvailableReplicas, d.Status.UnavailableReplicas)
	}
}

// killedScheduler: the control plane's kube-scheduler is killed and cannot
// start again (its kubeconfig is gone). Its mirror pod shows it as
// `kubectl get pod` would (not Ready, restarts, CrashLoopBackOff, the exit
// and the process's last log lines), and Cluster API's kubeadm
// control-plane provider, reading the pod with its own code, reports the
// scheduler and the control plane's components unhealthy; once the file is
// back, the kubelet's next restart brings it back and both see it healthy.
func (m *mixed) killedScheduler(t *testing.T, ctx context.Context, cpNode string) {
	var dir string
	var pid int
	for _, n := range rt.Nodes() {
		if n.NodeName == cpNode {
			dir, pid = n.Dir, n.Pids["kube-scheduler"]
		}
	}
	if pid == 0 {
		t.Fatalf("no kube-scheduler process on %s", cpNode)
	}
	conf := filepath.Join(dir, "root", "etc", "kubernetes", "scheduler.conf")
	if err := os.Rename(conf, conf+".moved"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.Rename(conf+".moved", conf); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	name := "kube-scheduler-" + cpNode
	poll.Until(t, time.Minute, func() string {
		p, err := m.workload.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return "no container status"
		}
		cs := p.Status.ContainerStatuses[0]
		last := cs.LastTerminationState.Terminated
		switch {
		case podIsReady(p) || cs.Ready:
			return name + " is still Ready"
		case cs.RestartCount < 2 || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff":
			return fmt.Sprintf("%s: %d restarts, state %+v", name, cs.RestartCount, cs.State)
		case last == nil || last.ExitCode == 0 || !strings.Contains(last.Message, "scheduler.conf"):
			return fmt.Sprintf("%s: last state %+v, want a failed exit naming scheduler.conf in its log lines", name, last)
		}
		return ""
	})

	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: cpNode, Namespace: "default"},
		Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: cpNode}}}
	health := func() (*metav1.Condition, *metav1.Condition) {
		cp := &kcp.ControlPlane{KCP: &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "mixed-control-plane", Namespace: "default"}},
			Machines: collections.FromMachines(machine)}
		(&kcp.Workload{Client: m.wc}).UpdateStaticPodConditions(ctx, cp)
		return conditions.Get(machine, controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition),
			conditions.Get(cp.KCP, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)
	}
	sched, all := health()
	if sched == nil || sched.Status != metav1.ConditionFalse || sched.Reason != controlplanev1.KubeadmControlPlaneMachinePodFailedReason ||
		all == nil || all.Status != metav1.ConditionFalse {
		t.Fatalf("the kubeadm control-plane provider sees the crashed scheduler as %+v, the components as %+v", sched, all)
	}

	restore()
	poll.Until(t, 3*time.Minute, func() string {
		p, err := m.workload.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if !podIsReady(p) {
			return name + " not Ready again yet"
		}
		if sched, all := health(); sched == nil || sched.Status != metav1.ConditionTrue || all == nil || all.Status != metav1.ConditionTrue {
			return fmt.Sprintf("provider: scheduler %+v, components %+v", sched, all)
		}
		return ""
	})
	if pids := func() int {
		for _, n := range rt.Nodes() {
			if n.NodeName == cpNode {
				return n.Pids["kube-scheduler"]
			}
		}
		return 0
	}(); pids == pid || pids == 0 || !alive(pids) {
		t.Errorf("kube-scheduler runs as pid %d after the restart (was %d)", pids, pid)
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
