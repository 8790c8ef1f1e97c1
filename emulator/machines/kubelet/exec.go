package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/ctrshell"
	"github.com/winkube/winkube/emulator/registry"
)

// ctrView is a running container's filesystem as exec sessions see it:
// its writable layer lives as long as the container does, so what one
// exec writes outside its volumes a later exec reads.
type ctrView struct {
	mu   sync.Mutex
	uid  types.UID
	view *containerruntime.View
	// cwd and sandbox are a HostProcess container's working directory
	// and CONTAINER_SANDBOX_MOUNT_POINT.
	cwd, sandbox string
}

// serveExec is the kubelet's exec endpoint (pkg/kubelet/server/server.go
// getExec, v1.36.3): the command comes in the "command" query
// parameters, the streams are served with cri-streaming's remotecommand,
// as the container runtime's streaming server does.
func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	ns, name, cname := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	pod, err := k.cfg.Client.CoreV1().Pods(ns).Get(r.Context(), name, getOpts)
	if err != nil || pod.Spec.NodeName != k.cfg.NodeName {
		// server.go getExec: "pod does not exist".
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spec *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == cname {
			spec = &pod.Spec.Containers[i]
		}
	}
	if spec == nil {
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", cname, name), http.StatusNotFound)
		return
	}
	if state := criState(pod, cname); state != "CONTAINER_RUNNING" {
		// containerd's CRI refuses an exec into a container that is not
		// running (internal/cri/server/container_exec.go, 301026e5),
		// which the kubelet's GetExec passes on as the gRPC error.
		http.Error(w, fmt.Sprintf("rpc error: code = Unknown desc = container is in %s state", state), http.StatusInternalServerError)
		return
	}
	cmd := r.URL.Query()["command"]
	ex := &executor{k: k, pod: pod, spec: spec}
	remotecommand.ServeExec(w, r, ex, name, string(pod.UID), cname, cmd, opts, 4*time.Hour, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// criState is the container's state as containerd's CRI names it
// (criContainerStateToString).
func criState(pod *corev1.Pod, name string) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		switch {
		case cs.State.Running != nil:
			return "CONTAINER_RUNNING"
		case cs.State.Terminated != nil:
			return "CONTAINER_EXITED"
		}
		return "CONTAINER_CREATED"
	}
	return "CONTAINER_UNKNOWN"
}

// serveNoProcess answers attach and run: there is no process whose
// streams attach could join, and run is exec's older form.
func serveNoProcess(w http.ResponseWriter, r *http.Request) {
	what := "attach"
	if strings.HasPrefix(r.URL.Path, "/run/") {
		what = "run"
	}
	http.Error(w, fmt.Sprintf("containers on winkube's simulated nodes run no application process: %s is not available (kubectl exec opens the container's simulated shell)", what), http.StatusNotImplemented)
}

type executor struct {
	k    *Kubelet
	pod  *corev1.Pod
	spec *corev1.Container
}

func (e *executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	c, cv, err := e.k.container(ctx, e.pod, e.spec)
	if err != nil {
		return err
	}
	if out == nil {
		out = nopCloser{io.Discard}
	}
	if errw == nil {
		errw = nopCloser{io.Discard}
		if tty {
			// With a terminal, stderr is the terminal too.
			errw = out
		}
	}
	cv.mu.Lock()
	defer cv.mu.Unlock()
	code, err := ctrshell.Exec(c, cmd, in, out, errw, tty)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// container is what an exec into the pod's container runs in.
func (k *Kubelet) container(ctx context.Context, pod *corev1.Pod, spec *corev1.Container) (*ctrshell.Container, *ctrView, error) {
	windows := k.cfg.Host.OS == "windows"
	hpc := HostProcessPod(pod)
	// The container runs, so its image is on the node: an exec reads it
	// there whatever the pull policy.
	img, err := k.pull(ctx, spec.Image, corev1.PullIfNotPresent, hpc)
	if err != nil {
		return nil, nil, err
	}
	// A HostProcess container sees the host's disk, whose system files
	// the view knows; a container's own root has its image's base.
	var files []string
	if !hpc {
		files, _ = registry.BaseFiles(spec.Image, k.cfg.Host.OS)
	}
	var imgEnv []string
	workDir := ""
	if img != nil && img.Process != nil {
		files = append(append([]string(nil), files...), img.Process.Files...)
		imgEnv, workDir = img.Process.Env, img.Process.WorkingDir
	}
	cwd := spec.WorkingDir
	if cwd == "" {
		cwd = workDir
	}
	env, err := containerruntime.Environment(ctx, k.cfg.Client, pod, *spec)
	if err != nil {
		return nil, nil, err
	}
	id := containerruntime.ContainerID(pod, spec.Name)
	k.execMu.Lock()
	cv := k.views[id]
	if cv == nil {
		mounts, err := containerruntime.Mounts(ctx, k.cfg.Client, k.cfg.Disk, pod, *spec)
		if err != nil {
			k.execMu.Unlock()
			return nil, nil, err
		}
		node := containerruntime.Node{Name: k.cfg.NodeName, OS: k.cfg.Host.OS, Build: k.cfg.Host.Build, Disk: k.cfg.Disk,
			Containerd: strings.TrimPrefix(k.cfg.NodeInfo.ContainerRuntimeVersion, "containerd://")}
		cv = &ctrView{uid: pod.UID}
		if hpc {
			cv.view, cv.cwd, cv.sandbox = containerruntime.HostProcess(node, containerruntime.Image{Files: files}, containerruntime.Container{ID: id, Pod: pod, Spec: *spec, Mounts: mounts}, cwd)
		} else {
			cv.view = containerruntime.ContainerView(node, files, mounts)
		}
		if k.views == nil {
			k.views = map[string]*ctrView{}
		}
		k.views[id] = cv
	}
	k.execMu.Unlock()

	hostname := podHostname(pod, k.cfg.NodeName)
	// containerd's Linux spec: HOSTNAME (the sandbox's hostname), then
	// the image's ENV, then the kubelet's variables, a later one winning
	// (internal/cri/server/container_create.go buildLinuxSpec, containerd
	// 301026e5). A Windows container gets no HOSTNAME from it.
	var all []string
	if !windows {
		all = append(all, "HOSTNAME="+hostname)
	}
	all = append(all, imgEnv...)
	for _, v := range env {
		all = append(all, v.Name+"="+v.Value)
	}
	if hpc {
		cwd = cv.cwd
		all = append(all, "CONTAINER_SANDBOX_MOUNT_POINT="+cv.sandbox)
	}
	c := &ctrshell.Container{Pod: pod.Namespace + "/" + pod.Name, Name: spec.Name, ID: id, Hostname: hostname, Env: all, Cwd: cwd, FS: cv.view}
	if k.cfg.PodDial != nil {
		podIP := pod.Status.PodIP
		if pod.Spec.HostNetwork {
			podIP = ""
		}
		c.Dial = k.cfg.PodDial(podIP)
	}
	return c, cv, nil
}

// podHostname is the container's hostname: the node's for a pod in the
// host's network (a HostProcess pod is one), else spec.hostname or the
// pod's name, cut to 63 characters (pkg/kubelet/kubelet_pods.go
// GeneratePodHostNameAndDomain and truncatePodHostnameIfNeeded, v1.36.3).
func podHostname(pod *corev1.Pod, node string) string {
	if pod.Spec.HostNetwork {
		return node
	}
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// dropViews forgets the pod's containers' writable layers and removes
// its volumes' directory from the node's disk, as the kubelet cleans up
// pods/<uid> when the pod is gone.
func (k *Kubelet) dropViews(uid types.UID) {
	k.execMu.Lock()
	for id, cv := range k.views {
		if cv.uid == uid {
			delete(k.views, id)
		}
	}
	k.execMu.Unlock()
	if k.cfg.Disk.Root == "" {
		return
	}
	if hp, err := k.cfg.Disk.HostPath(containerruntime.PodDir(k.cfg.Disk.Windows, string(uid))); err == nil {
		if err := os.RemoveAll(hp); err != nil && !errors.Is(err, os.ErrNotExist) {
			k.cfg.Log.Error(err, "removing the pod's directory", "uid", uid)
		}
	}
}
