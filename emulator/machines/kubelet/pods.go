package kubelet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

func resourceMustParse(s string) resource.Quantity { return resource.MustParse(s) }
func labelsEverything() labels.Selector            { return labels.Everything() }

func (k *Kubelet) work(ctx context.Context) {
	for {
		key, quit := k.queue.Get()
		if quit {
			return
		}
		err := k.syncPod(ctx, key)
		if err != nil && ctx.Err() == nil {
			k.cfg.Log.V(1).Info("syncing pod", "pod", key, "error", err.Error())
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

func splitKey(key string) (string, string) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// syncPod brings one pod's status to what this node would report. It
// follows the real kubelet's order: kubelet.go SyncPod (admission, then
// WaitForAttachAndMount), then the runtime manager's SyncPod steps
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go SyncPod, kubernetes
// v1.36.3, read at 000f2605): step 4 creates the sandbox and its
// network, steps 5 to 8 pull and create the containers and start them;
// a pod being deleted goes the way of SyncTerminatingPod.
func (k *Kubelet) syncPod(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.forget(ctx)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		return k.syncTerminatingPod(ctx, key, pod)
	}
	if isMirror(pod) || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	status := pod.Status.DeepCopy()
	if rej := admit(k.cfg.Host, pod); rej != nil {
		k.cfg.Logs.Write(vmdisk.Kubelet, "Pod %s rejected: %s: %s", key, rej.Reason, rej.Message)
		status.Phase, status.Reason, status.Message = corev1.PodFailed, rej.Reason, rej.Message
		k.event(ctx, pod, corev1.EventTypeWarning, rej.Reason, rej.Message)
		return k.writeStatus(ctx, pod, status)
	}
	if done, err := k.waitForAttachAndMount(ctx, key, pod, status); done {
		return err
	}
	sb, done, err := k.createSandbox(ctx, key, pod, status)
	if done {
		return err
	}
	images, failed, err := k.pullAndCreateContainers(ctx, key, pod, sb.hostProcess)
	if err != nil {
		return err
	}
	if sb.ignoredHostNet {
		setIPs(status, k.cfg.Address, k.cfg.Address)
	} else {
		setIPs(status, k.cfg.Address, sb.ip)
	}
	if status.StartTime == nil {
		status.StartTime = ptr.To(metav1.Now())
	}
	if len(failed) > 0 {
		k.setRunning(ctx, string(pod.UID), nil, false)
		k.containerStatuses(status, pod, images, failed)
		for c, f := range failed {
			k.event(ctx, pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("container %s: %s", c, f.Message))
		}
		if err := k.writeStatus(ctx, pod, status); err != nil {
			return err
		}
		return fmt.Errorf("back-off: %s", failedSummary(failed)) // retried as a kubelet backs off
	}
	return k.startContainers(ctx, key, pod, status, sb, images)
}

// syncTerminatingPod is a deleted pod's end: its containers stop at
// once; the kubelet unmounts the pod's volumes and then removes the pod
// (kubelet.go SyncTerminatingPod and SyncTerminatedPod).
func (k *Kubelet) syncTerminatingPod(ctx context.Context, key string, pod *corev1.Pod) error {
	k.mu.Lock()
	run := k.runs[pod.UID]
	k.mu.Unlock()
	k.unmountVolumes(ctx, run)
	k.deregisterCSIPlugins(ctx, pod.UID)
	k.dropRun(pod.UID)
	k.setRunning(ctx, string(pod.UID), nil, false)
	k.releaseIP(string(pod.UID), key)
	err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// waitForAttachAndMount: the volume manager mounts the pod's volumes
// before its sandbox is made (kubelet.go SyncPod, WaitForAttachAndMount).
// done says the sync ends here, with err.
func (k *Kubelet) waitForAttachAndMount(ctx context.Context, key string, pod *corev1.Pod, status *corev1.PodStatus) (done bool, err error) {
	waiting, err := k.mountVolumes(ctx, pod, k.podRun(pod))
	if err != nil {
		return true, err
	}
	if waiting == "" {
		return false, nil
	}
	k.waiting(status, pod, "ContainerCreating", "")
	if status.StartTime == nil {
		status.StartTime = ptr.To(metav1.Now())
	}
	if err := k.writeStatus(ctx, pod, status); err != nil {
		return true, err
	}
	k.queue.AddAfter(key, time.Second)
	return true, nil
}

// sandbox is what creating a pod's sandbox came to.
type sandbox struct {
	// hostProcess: a Windows HostProcess pod, in the host's network.
	hostProcess bool
	// ignoredHostNet: a Windows pod asking for the host network without
	// HostProcess gets a pod network all the same, yet reports the
	// node's IP (see hostNetworkIgnored): its ports are not where its
	// status says.
	ignoredHostNet bool
	// hostNet: the pod shares the node's network; ip is the pod's.
	hostNet bool
	ip      netip.Addr
}

// createSandbox is the runtime manager's step 4: the pod's sandbox, its
// network set up (CNI ADD) and its IP. done says the sync ends here,
// with err.
func (k *Kubelet) createSandbox(ctx context.Context, key string, pod *corev1.Pod, status *corev1.PodStatus) (sb sandbox, done bool, err error) {
	uid := string(pod.UID)
	sb.hostProcess = k.cfg.Host.OS == "windows" && HostProcessPod(pod) && k.cfg.Host.knowsHostProcess()
	if k.cfg.Host.OS == "windows" && status.StartTime == nil {
		for _, c := range allContainers(pod) {
			for _, l := range ignoredOnWindows(pod, c) {
				k.cfg.Logs.Write(vmdisk.Kubelet, "%s pod=%q containerName=%q", l, key, c.Name)
			}
		}
	}
	if sb.hostProcess {
		if err := k.cfg.Host.hostProcessSandbox(); err != nil {
			k.waiting(status, pod, "ContainerCreating", "")
			k.event(ctx, pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
			k.cfg.Logs.Write(vmdisk.Kubelet, "pod %s: %v", key, err)
			_ = k.writeStatus(ctx, pod, status)
			return sb, true, err // retried with back-off, as the kubelet retries a sandbox
		}
	}
	sb.ignoredHostNet = k.cfg.Host.hostNetworkIgnored(pod)
	sb.hostNet = (pod.Spec.HostNetwork && !sb.ignoredHostNet) || sb.hostProcess
	sb.ip = k.cfg.Address
	if sb.hostNet {
		return sb, false, nil
	}
	k.mu.Lock()
	ready, reason := k.ready, k.reason
	k.mu.Unlock()
	// The kubelet waits for the network only for pods it takes for
	// pod-network ones (kubelet.go syncPod, IsHostNetworkPod).
	if !ready && !pod.Spec.HostNetwork {
		k.waiting(status, pod, "ContainerCreating", "")
		k.event(ctx, pod, corev1.EventTypeWarning, "NetworkNotReady", "network is not ready: "+reason)
		return sb, true, k.writeStatus(ctx, pod, status)
	}
	// cniFailed is a failed CNI ADD: the sandbox is not created.
	cniFailed := func(err error) error {
		msg := fmt.Sprintf("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox %q: %v", containerruntime.ContainerID(pod, "sandbox"), err)
		k.waiting(status, pod, "ContainerCreating", "")
		k.event(ctx, pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", msg)
		k.cfg.Logs.Write(vmdisk.CNI, "ADD %s failed: %v", key, err)
		_ = k.writeStatus(ctx, pod, status)
		return err
	}
	if k.cfg.SetUpNetwork != nil && pod.Status.PodIP == "" {
		if err := k.cfg.SetUpNetwork(ctx, pod); err != nil {
			return sb, true, cniFailed(err)
		}
	}
	had := pod.Status.PodIP
	if sb.ignoredHostNet {
		had = "" // the node's IP, as reported, is not the sandbox's
	}
	ip, fresh, err := k.podIP(ctx, uid, key, had)
	if err != nil {
		k.waiting(status, pod, "ContainerCreating", "")
		k.event(ctx, pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
		_ = k.writeStatus(ctx, pod, status)
		return sb, true, err
	}
	sb.ip = ip
	if k.cfg.NetworkAddressed != nil && fresh && pod.Status.PodIP == "" {
		if err := k.cfg.NetworkAddressed(ctx, pod, containerruntime.ContainerID(pod, "sandbox"), ip); err != nil {
			k.releaseIP(uid, key)
			return sb, true, cniFailed(err)
		}
	}
	return sb, false, nil
}

// pullAndCreateContainers pulls every container's image and creates it
// (the runtime manager's startContainer: EnsureImageExists, then
// CreateContainer): what failed is kept per container, for the
// container's status; err is an error of the node itself.
func (k *Kubelet) pullAndCreateContainers(ctx context.Context, key string, pod *corev1.Pod, hostProcess bool) (map[string]*Pulled, map[string]*ContainerFailure, error) {
	images := map[string]*Pulled{}
	var failed map[string]*ContainerFailure
	for _, c := range allContainers(pod) {
		p, err := k.pullFor(ctx, string(pod.UID), &c, hostProcess)
		if f, ok := err.(*ContainerFailure); ok {
			k.cfg.Logs.Write(vmdisk.Containerd, "PullImage %q for %s container %s failed: %s: %s", c.Image, key, c.Name, f.Reason, f.Message)
			if failed == nil {
				failed = map[string]*ContainerFailure{}
			}
			failed[c.Name] = f
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if f := createsOnWindows(k.cfg.Host, pod, c); f != nil {
			k.cfg.Logs.Write(vmdisk.Containerd, "CreateContainer for %s container %s failed: %s", key, c.Name, f.Message)
			if failed == nil {
				failed = map[string]*ContainerFailure{}
			}
			failed[c.Name] = f
			continue
		}
		images[c.Name] = p
	}
	return images, failed, nil
}

// startContainers runs the pod's containers forward (init, then main:
// the runtime manager's steps 6 and 8, probes and restarts included),
// writes the status, and ends the sandbox once every container ended.
func (k *Kubelet) startContainers(ctx context.Context, key string, pod *corev1.Pod, status *corev1.PodStatus, sb sandbox, images map[string]*Pulled) error {
	uid := string(pod.UID)
	run := k.podRun(pod)
	run.podIP, run.hostIP, run.images = sb.ip.String(), k.cfg.Address.String(), images
	if run.net == nil {
		run.net = k.podNet(ctx, pod, sb.hostNet, sb.ip)
	}
	now := time.Now()
	next := run.advance(now, runEnv{ctx: ctx, check: k.cfg.StartCheck, exec: k.cfg.ExecProbe})
	run.fill(status)
	k.mu.Lock()
	for _, c := range append(append([]*ctrRun{}, run.inits...), run.mains...) {
		if c.output != nil {
			k.outputs[uid+"/"+c.spec.Name] = c.output
		}
	}
	k.mu.Unlock()
	// What the running processes serve on the node: a process still
	// waiting for something serves nothing yet.
	var provides []string
	for _, c := range run.mains {
		if p := images[c.spec.Name]; p != nil && p.Provides != "" && c.running && c.waiting == "" {
			provides = append(provides, p.Provides)
		}
	}
	events := run.events
	run.events = nil
	for _, e := range events {
		switch e.reason {
		case "Started":
			k.cfg.Logs.Write(vmdisk.Containerd, "StartContainer for pod %s: %s (returns successfully)", key, e.msg)
		case "Failed", "Killing", "BackOff", "Unhealthy", "ProbeNotRun":
			k.cfg.Logs.Write(vmdisk.Kubelet, "pod %s: %s: %s", key, e.reason, e.msg)
		}
		k.event(ctx, pod, e.typ, e.reason, e.msg)
	}
	if err := k.writeStatus(ctx, pod, status); err != nil {
		return err
	}
	switch {
	case status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed:
		// The sandbox goes once every container has ended.
		k.cfg.Logs.Write(vmdisk.Kubelet, "pod %s %s", key, status.Phase)
		k.unmountVolumes(ctx, run)
		k.deregisterCSIPlugins(ctx, pod.UID)
		k.dropRun(pod.UID)
		k.setRunning(ctx, uid, nil, false)
		k.releaseIP(uid, key)
		return nil
	case run.running():
		k.mu.Lock()
		_, was := k.running[uid]
		k.mu.Unlock()
		if !was {
			if k.cfg.Started != nil {
				k.cfg.Started(ctx, pod)
			}
			if k.cfg.CSIPlugin != nil {
				if driver, p := k.cfg.CSIPlugin(pod); p != nil {
					if err := k.RegisterCSIPlugin(ctx, driver, pod.UID, p); err != nil {
						k.cfg.Logs.Write(vmdisk.Kubelet, "plugin %s of pod %s: %v", driver, key, err)
					}
				}
			}
		}
		// What a pod's images installed stays while the pod exists, as a
		// CNI's configuration stays on disk while its pod restarts.
		k.setRunning(ctx, uid, provides, true)
	}
	if !next.IsZero() {
		k.queue.AddAfter(key, max(next.Sub(now), 0))
	}
	return nil
}

// podRun is the runtime's state of a pod's containers, made at the pod's
// first sync.
func (k *Kubelet) podRun(pod *corev1.Pod) *podRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.runs[pod.UID]
	if !ok {
		r = newPodRun(pod)
		k.runs[pod.UID] = r
	}
	r.pod = pod
	return r
}

func (k *Kubelet) dropRun(uid types.UID) {
	k.mu.Lock()
	if r, ok := k.runs[uid]; ok {
		r.closeAll()
	}
	delete(k.runs, uid)
	k.mu.Unlock()
	k.dropViews(uid)
	k.stopped(uid)
}

// stopped tells Config.Stopped that a pod's containers ended.
func (k *Kubelet) stopped(uid types.UID) {
	if k.cfg.Stopped != nil {
		k.cfg.Stopped(uid)
	}
}

// PodCIDR is the node's pod CIDR as its IPAM hands addresses out from it
// (invalid before the controller-manager assigned one): the pod IPs that
// live on this node.
func (k *Kubelet) PodCIDR() netip.Prefix { return k.ipam.prefix() }

func failedSummary(f map[string]*ContainerFailure) string {
	for c, v := range f {
		return c + ": " + v.Reason
	}
	return ""
}

func (k *Kubelet) forget(ctx context.Context) {
	// The pod is gone from the API; its UID is no longer known here, so
	// drop whatever pods are no longer listed.
	listed := map[string]bool{}
	pods, _ := k.pods.List(labels.Everything())
	for _, p := range pods {
		listed[string(p.UID)] = true
	}
	k.mu.Lock()
	var gone []string
	for uid := range k.running {
		if !listed[uid] {
			gone = append(gone, uid)
		}
	}
	var goneRuns []*podRun
	var goneUIDs []types.UID
	for uid, r := range k.runs {
		if !listed[string(uid)] {
			r.closeAll()
			delete(k.runs, uid)
			for key := range k.outputs {
				if strings.HasPrefix(key, string(uid)+"/") {
					delete(k.outputs, key)
				}
			}
			goneRuns, goneUIDs = append(goneRuns, r), append(goneUIDs, uid)
		}
	}
	for key := range k.pullBackOff {
		if uid, _, _ := strings.Cut(key, "_"); !listed[uid] {
			delete(k.pullBackOff, key)
		}
	}
	k.mu.Unlock()
	for i, r := range goneRuns {
		k.unmountVolumes(ctx, r)
		k.deregisterCSIPlugins(ctx, goneUIDs[i])
		k.stopped(goneUIDs[i])
	}
	for _, uid := range gone {
		k.releaseIP(uid, "")
		k.setRunning(ctx, uid, nil, false)
	}
}

func setIPs(s *corev1.PodStatus, host, pod netip.Addr) {
	s.HostIP, s.HostIPs = host.String(), []corev1.HostIP{{IP: host.String()}}
	s.PodIP, s.PodIPs = pod.String(), []corev1.PodIP{{IP: pod.String()}}
}

func containerID(pod *corev1.Pod, name string) string {
	return "containerd://" + containerruntime.ContainerID(pod, name)
}

// containerStatuses fills in what the runtime reports: init containers
// completed, the others running, or waiting for the reason they failed.
func (k *Kubelet) containerStatuses(s *corev1.PodStatus, pod *corev1.Pod, images map[string]*Pulled, failed map[string]*ContainerFailure) {
	now := metav1.Now()
	started := func(old []corev1.ContainerStatus, name string) metav1.Time {
		for _, o := range old {
			if o.Name == name && o.State.Running != nil {
				return o.State.Running.StartedAt
			}
		}
		return now
	}
	st := func(c corev1.Container, init bool, old []corev1.ContainerStatus) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		if f, ok := failed[c.Name]; ok {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: f.Reason, Message: f.Message}
			cs.Started = ptr.To(false)
			return cs
		}
		cs.ImageID = images[c.Name].ImageID
		cs.ContainerID = containerID(pod, c.Name)
		if len(failed) > 0 {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
			if !init {
				cs.State.Waiting.Reason = "ContainerCreating"
			}
			cs.Started = ptr.To(false)
			return cs
		}
		if init {
			cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: "Completed", ExitCode: 0, StartedAt: now, FinishedAt: now, ContainerID: cs.ContainerID}
			cs.Ready = true
			cs.Started = ptr.To(false)
			return cs
		}
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: started(old, c.Name)}
		cs.Ready, cs.Started = true, ptr.To(true)
		return cs
	}
	var inits, mains []corev1.ContainerStatus
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, st(c, true, s.InitContainerStatuses))
	}
	for _, c := range pod.Spec.Containers {
		mains = append(mains, st(c, false, s.ContainerStatuses))
	}
	s.InitContainerStatuses, s.ContainerStatuses = inits, mains
	ok := len(failed) == 0
	if ok {
		s.Phase = corev1.PodRunning
	} else {
		s.Phase = corev1.PodPending
	}
	cond := func(t corev1.PodConditionType, v bool, reason string) {
		status := corev1.ConditionFalse
		if v {
			status, reason = corev1.ConditionTrue, ""
		}
		setCondition(s, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
	}
	cond(corev1.PodReadyToStartContainers, true, "")
	cond(corev1.PodInitialized, ok || !initFailed(pod, failed), "ContainersNotInitialized")
	cond(corev1.ContainersReady, ok, "ContainersNotReady")
	cond(corev1.PodReady, ok, "ContainersNotReady")
}

func initFailed(pod *corev1.Pod, failed map[string]*ContainerFailure) bool {
	for _, c := range pod.Spec.InitContainers {
		if _, ok := failed[c.Name]; ok {
			return true
		}
	}
	return false
}

// waiting reports every container waiting for one reason, before the
// sandbox exists.
func (k *Kubelet) waiting(s *corev1.PodStatus, pod *corev1.Pod, reason, msg string) {
	s.Phase = corev1.PodPending
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false), State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}})
	}
	now := metav1.Now()
	setCondition(s, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: now})
	setCondition(s, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now})
}

func setCondition(s *corev1.PodStatus, c corev1.PodCondition) {
	for i, o := range s.Conditions {
		if o.Type == c.Type {
			if o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
			s.Conditions[i] = c
			return
		}
	}
	s.Conditions = append(s.Conditions, c)
}

// writeStatus posts the pod's new status s as the kubelet's status manager
// does: nothing when it is what the API server already has, otherwise a
// strategic merge patch of the status subresource holding only what
// changed, with the pod's UID as a precondition, so that a pod recreated
// under the same name is not written (kubernetes/kubernetes
// pkg/kubelet/status/status_manager.go, updateStatusInternal ignores a
// status equal to the last one and syncPod patches through
// pkg/util/pod.PatchPodStatus, which sends no request for an empty diff,
// @0033cb0a31e95198abfb1be70ce5befdf4e7eec1). Every sync of a pod used to
// PUT its whole status, changed or not, and the event of that write
// brought the pod back for another: 30 status writes per node in a
// bring-up. The diff is taken from the informer's copy of the pod, which
// s was derived from; the status manager reads the pod live (a GET)
// before each patch, which this kubelet leaves out.
func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, s *corev1.PodStatus) error {
	// JSON keeps times to the second, as the API server stores them, so a
	// status rebuilt with a later clock but the same seconds is the same.
	before, err := json.Marshal(corev1.Pod{Status: pod.Status})
	if err != nil {
		return err
	}
	after, err := json.Marshal(corev1.Pod{Status: *s})
	if err != nil {
		return err
	}
	if bytes.Equal(before, after) {
		return nil
	}
	withUID, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}, Status: *s})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(before, withUID, corev1.Pod{})
	if err != nil {
		return fmt.Errorf("status patch of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = k.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or recreated under its name (the UID precondition): the
		// new pod is synced on its own.
		return nil
	}
	return err
}

// event records what happened to a pod, once per reason and pod, as the
// kubelet's recorder would (it aggregates repeats).
func (k *Kubelet) event(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	k.eventKeyed(ctx, pod, string(pod.UID)+"/"+reason, typ, reason, msg)
}

// eventKeyed records an event unless one of the same key was.
func (k *Kubelet) eventKeyed(ctx context.Context, pod *corev1.Pod, key, typ, reason, msg string) {
	k.mu.Lock()
	if k.sent == nil {
		k.sent = map[string]bool{}
	}
	seen := k.sent[key]
	k.sent[key] = true
	k.mu.Unlock()
	if seen {
		return
	}
	k.cfg.Logs.Write(vmdisk.Kubelet, "Event pod %s/%s: %s %s: %s", pod.Namespace, pod.Name, typ, reason, msg)
	now := metav1.Now()
	_, err := k.cfg.Client.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: k.cfg.NodeName},
	}, metav1.CreateOptions{})
	if err != nil && ctx.Err() == nil {
		k.cfg.Log.V(1).Info("recording event", "error", err.Error())
	}
}

// ipam hands out pod addresses from the node's pod CIDR, which the
// controller-manager's node IPAM assigns after registration.
type ipam struct {
	mu    sync.Mutex
	cidr  netip.Prefix
	byUID map[string]netip.Addr
	// pods names the pod (namespace/name) of each UID with an address.
	pods map[string]string
}

// podIP allocates a pod's address; a pod that already has one (the kubelet
// restarted) keeps it.
func (k *Kubelet) podIP(ctx context.Context, uid, pod, had string) (netip.Addr, bool, error) {
	a, fresh, err := k.allocate(ctx, uid, pod, had)
	if err == nil && fresh {
		k.cfg.Logs.Write(vmdisk.CNI, "ADD %s: address %s from pod CIDR %s", pod, a, k.ipam.prefix())
	}
	if err != nil {
		k.cfg.Logs.Write(vmdisk.CNI, "ADD %s failed: %v", pod, err)
	}
	return a, fresh, err
}

// loadCIDR reads the node's pod CIDR, which the controller-manager's node
// IPAM assigns after registration; the caller holds k.ipam.mu.
func (k *Kubelet) loadCIDR(ctx context.Context) error {
	if k.ipam.cidr.IsValid() {
		return nil
	}
	node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Spec.PodCIDR == "" {
		return fmt.Errorf("failed to set up sandbox network: node %s has no pod CIDR yet", k.cfg.NodeName)
	}
	p, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil {
		return err
	}
	k.ipam.cidr = p.Masked()
	return nil
}

func (i *ipam) prefix() netip.Prefix {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.cidr
}

// releaseIP frees a pod's address, as the CNI's DEL does.
func (k *Kubelet) releaseIP(uid, pod string) {
	k.ipam.mu.Lock()
	a, had := k.ipam.byUID[uid]
	if pod == "" {
		pod = k.ipam.pods[uid]
	}
	delete(k.ipam.byUID, uid)
	delete(k.ipam.pods, uid)
	k.ipam.mu.Unlock()
	if had {
		k.cfg.Logs.Write(vmdisk.CNI, "DEL %s: released %s", pod, a)
		if k.cfg.TearDownNetwork != nil {
			k.cfg.TearDownNetwork(types.UID(uid), pod)
		}
	}
}

// allocate hands out the address of pod (namespace/name); fresh is false
// when the pod had it. The caller must not hold k.ipam.mu.
func (k *Kubelet) allocate(ctx context.Context, uid, pod, had string) (netip.Addr, bool, error) {
	k.ipam.mu.Lock()
	defer k.ipam.mu.Unlock()
	if a, ok := k.ipam.byUID[uid]; ok {
		return a, false, nil
	}
	if err := k.loadCIDR(ctx); err != nil {
		return netip.Addr{}, false, err
	}
	used := map[netip.Addr]bool{}
	for _, a := range k.ipam.byUID {
		used[a] = true
	}
	if prev, err := netip.ParseAddr(had); err == nil && k.ipam.cidr.Contains(prev) && !used[prev] {
		k.ipam.byUID[uid], k.ipam.pods[uid] = prev, pod
		return prev, true, nil
	}
	// .0 is the network and .1 the bridge/gateway, as with host-local IPAM.
	for a := k.ipam.cidr.Addr().Next().Next(); k.ipam.cidr.Contains(a); a = a.Next() {
		if !used[a] {
			k.ipam.byUID[uid], k.ipam.pods[uid] = a, pod
			return a, true, nil
		}
	}
	return netip.Addr{}, false, fmt.Errorf("failed to allocate a pod IP: pod CIDR %s of node %s is exhausted", k.ipam.cidr, k.cfg.NodeName)
}

// Mirror pods carry these annotations; Cluster API's control-plane health
// checks read the mirror pods of the static control-plane pods.
const (
	mirrorAnnotation = "kubernetes.io/config.mirror"
	sourceAnnotation = "kubernetes.io/config.source"
	hashAnnotation   = "kubernetes.io/config.hash"
)

func isMirror(p *corev1.Pod) bool { _, ok := p.Annotations[mirrorAnnotation]; return ok }

// mirrorStaticPods keeps a running mirror pod in the API for every static
// pod, recreating one that was deleted, as the kubelet does.
func (k *Kubelet) mirrorStaticPods(ctx context.Context) {
	if len(k.cfg.StaticPods) == 0 {
		return
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		for _, sp := range k.cfg.StaticPods {
			if err := k.mirror(ctx, sp); err != nil && ctx.Err() == nil {
				k.cfg.Log.V(1).Info("mirror pod", "pod", sp.Name, "error", err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-k.kick:
		}
	}
}

func (k *Kubelet) mirror(ctx context.Context, sp *corev1.Pod) error {
	pods := k.cfg.Client.CoreV1().Pods(sp.Namespace)
	name := sp.Name + "-" + k.cfg.NodeName
	// From the informer: the Node authorizer lets a node read only pods
	// already bound to it.
	cur, err := k.pods.Pods(sp.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p := sp.DeepCopy()
		p.Name, p.Spec.NodeName = name, k.cfg.NodeName
		sum := sha256.Sum256([]byte(p.Namespace + "/" + p.Name + fmt.Sprint(p.Spec.Containers)))
		hash := hex.EncodeToString(sum[:16])
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[mirrorAnnotation], p.Annotations[sourceAnnotation], p.Annotations[hashAnnotation] = hash, "file", hash
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true)}}
		p.UID = types.UID("")
		if cur, err = pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// The node lifecycle controller marks pods not ready while the node is
	// NotReady; the kubelet reports them as its processes are, as here.
	s := k.staticStatus(cur)
	if cur.Status.Phase == s.Phase && podReady(cur) == podReady(&corev1.Pod{Status: *s}) &&
		equality.Semantic.DeepEqual(cur.Status.ContainerStatuses, s.ContainerStatuses) {
		return nil
	}
	return k.writeStatus(ctx, cur, s)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pull is the kubelet's EnsureImageExists and the runtime's pull of a
// container's image. An image already on the node is not pulled again
// unless the policy is Always, so its registry is not asked (a registry
// that is down does not stop it); an image that is not there is never
// pulled under Never (pkg/kubelet/images/image_manager.go
// imagePullPrecheck and imageNotPresentOnNeverPolicyError, v1.36.3). Any
// other is fetched from its registry, which needs the machine's way to the
// internet for Tcp.
func (k *Kubelet) pull(ctx context.Context, ref string, policy corev1.PullPolicy, hostProcess bool) (*Pulled, error) {
	canon := registry.Canonical(ref)
	k.mu.Lock()
	present := k.images[canon]
	k.mu.Unlock()
	if policy == "" {
		policy = defaultPullPolicy(canon)
	}
	switch {
	case present != nil && policy != corev1.PullAlways:
		return unpack(present, k.cfg.Host, ref, hostProcess)
	case present == nil && policy == corev1.PullNever:
		return nil, &ContainerFailure{"ErrImageNeverPull", fmt.Sprintf("Container image %q is not present with pull policy of Never", ref)}
	case present == nil && k.cfg.Egress != nil:
		if err := k.cfg.Egress("Tcp"); err != nil {
			return nil, unreachableRegistry(ref)
		}
	}
	m, err := resolve(ctx, k.cfg.Images, ref)
	if err != nil {
		return nil, err
	}
	p, err := unpack(m, k.cfg.Host, ref, hostProcess)
	if err == nil {
		k.mu.Lock()
		k.images[canon] = m
		k.mu.Unlock()
	}
	return p, err
}

// defaultPullPolicy is the API server's default for a container that names
// none: Always for the tag latest (which a reference without a tag or
// digest has), IfNotPresent otherwise (pkg/apis/core/v1/defaults.go
// SetDefaults_Container, v1.36.3). Pods reach the kubelet defaulted; this
// is for those a test makes without the API server.
func defaultPullPolicy(canon string) corev1.PullPolicy {
	if strings.HasSuffix(canon, ":latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// pullBackOff is the kubelet's image back-off for one pod and image: a
// failed pull is not tried again until it ends, 10 s doubling to 300 s
// (pkg/kubelet/kubelet.go imageBackOff, MaxImageBackOff, v1.36.3), and a
// sync in it reports ImagePullBackOff with the failed pull's error
// (pkg/kubelet/images/image_manager.go EnsureImageExists).
type pullBackOff struct {
	until  time.Time
	period time.Duration
	last   string
}

const (
	imageBackOffPeriod = 10 * time.Second
	maxImageBackOff    = 300 * time.Second
)

func (k *Kubelet) pullFor(ctx context.Context, uid string, c *corev1.Container, hostProcess bool) (*Pulled, error) {
	image := c.Image
	key := uid + "_" + image
	now := time.Now()
	k.mu.Lock()
	b := k.pullBackOff[key]
	k.mu.Unlock()
	if b != nil && now.Before(b.until) {
		return nil, &ContainerFailure{"ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q: %s", image, b.last)}
	}
	p, err := k.pull(ctx, image, c.ImagePullPolicy, hostProcess)
	k.mu.Lock()
	defer k.mu.Unlock()
	var f *ContainerFailure
	switch {
	case errors.As(err, &f) && f.Reason == "ErrImagePull":
		if b == nil {
			b = &pullBackOff{period: imageBackOffPeriod}
		} else {
			b.period = min(2*b.period, maxImageBackOff)
		}
		b.until, b.last = now.Add(b.period), "ErrImagePull: "+f.Message
		k.pullBackOff[key] = b
	case err == nil:
		delete(k.pullBackOff, key)
	}
	return p, err
}
