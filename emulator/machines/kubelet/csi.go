package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// What the kubelet does for CSI volumes, after kubernetes v1.36.3:
// plugin registration (pkg/kubelet/pluginmanager, pkg/volume/csi
// csi_plugin.go RegisterPlugin and nodeinfomanager InstallCSIDriver), the
// volume manager's wait for attach and mount (pkg/kubelet/volumemanager
// volume_manager.go WaitForAttachAndMount), the CSI attacher's
// WaitForAttach and MountDevice (csi_attacher.go) and the mounter's
// SetUp (csi_mounter.go), and their unmount when the pod goes. The calls
// to the driver are its node service's (NodeGetInfo, NodeStageVolume,
// NodePublishVolume, NodeUnpublishVolume, NodeUnstageVolume), made on the
// plugin the node's driver pod registered.

// CSIPlugin is a CSI driver's node service as the kubelet calls it over
// the driver's socket. Errors are the gRPC errors' text, as the kubelet
// shows them ("rpc error: code = ... desc = ...").
type CSIPlugin interface {
	NodeGetInfo(ctx context.Context) (CSINodeInfo, error)
	NodeStageVolume(ctx context.Context, volumeID string, publishContext map[string]string, stagingPath string) error
	NodePublishVolume(ctx context.Context, volumeID, stagingPath, targetPath string, readOnly bool) error
	NodeUnpublishVolume(ctx context.Context, volumeID, targetPath string) error
	NodeUnstageVolume(ctx context.Context, volumeID, stagingPath string) error
}

// CSINodeInfo is NodeGetInfo's answer.
type CSINodeInfo struct {
	NodeID     string
	MaxVolumes int64
	Topology   map[string]string
}

const (
	// nodeIDAnnotation maps each registered driver to its node ID
	// (nodeinfomanager.go annotationKeyNodeID).
	nodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"
	// podAttachAndMountTimeout is how long the kubelet waits for a pod's
	// volumes before it says so (kubelet.go podAttachAndMountTimeout).
	podAttachAndMountTimeout = 2*time.Minute + 3*time.Second
)

// csiRegistration is a driver registered by a pod on this node.
type csiRegistration struct {
	plugin CSIPlugin
	pod    types.UID
}

// csiVolume is a CSI volume a pod of this node has mounted.
type csiVolume struct {
	driver, handle, pv    string
	staging, target, uniq string
	plugin                CSIPlugin
}

// RegisterCSIPlugin is the plugin watcher finding a driver's registration
// socket, which its pod's node-driver-registrar creates: the kubelet asks
// the driver for its node's information and records it on the Node (the
// node ID annotation, the topology labels) and on the CSINode object the
// scheduler and the external attacher read.
func (k *Kubelet) RegisterCSIPlugin(ctx context.Context, driver string, pod types.UID, p CSIPlugin) error {
	info, err := p.NodeGetInfo(ctx)
	if err != nil {
		return fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: %w", err)
	}
	node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ids := map[string]string{}
	if s := node.Annotations[nodeIDAnnotation]; s != "" {
		_ = json.Unmarshal([]byte(s), &ids)
	}
	ids[driver] = info.NodeID
	idJSON, _ := json.Marshal(ids)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodeIDAnnotation: string(idJSON)}, "labels": info.Topology}})
	if _, err := k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(info.Topology))
	entry := storagev1.CSINodeDriver{Name: driver, NodeID: info.NodeID, TopologyKeys: keys}
	if info.MaxVolumes > 0 {
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To(int32(info.MaxVolumes))}
	}
	if err := k.updateCSINode(ctx, node, func(drivers []storagev1.CSINodeDriver) []storagev1.CSINodeDriver {
		return append(slices.DeleteFunc(drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver }), entry)
	}); err != nil {
		return err
	}
	k.mu.Lock()
	if k.csi == nil {
		k.csi = map[string]csiRegistration{}
	}
	k.csi[driver] = csiRegistration{plugin: p, pod: pod}
	k.mu.Unlock()
	k.cfg.Logs.Write(vmdisk.Kubelet, "Register new plugin with name: %s (node ID %s, topology %v, max volumes %d)", driver, info.NodeID, info.Topology, info.MaxVolumes)
	// Pods waiting for the driver can mount now.
	for _, key := range k.queueAllPods() {
		k.queue.Add(key)
	}
	return nil
}

// deregisterCSIPlugins drops the drivers the pod registered, as the plugin
// watcher does when the registration socket goes with the pod
// (nodeinfomanager UninstallCSIDriver).
func (k *Kubelet) deregisterCSIPlugins(ctx context.Context, pod types.UID) {
	k.mu.Lock()
	var gone []string
	for d, r := range k.csi {
		if r.pod == pod {
			gone = append(gone, d)
			delete(k.csi, d)
		}
	}
	k.mu.Unlock()
	for _, d := range gone {
		k.cfg.Logs.Write(vmdisk.Kubelet, "DeRegisterPlugin called for %s", d)
		node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		ids := map[string]string{}
		if s := node.Annotations[nodeIDAnnotation]; s != "" {
			_ = json.Unmarshal([]byte(s), &ids)
		}
		delete(ids, d)
		var v any
		if len(ids) > 0 {
			b, _ := json.Marshal(ids)
			v = string(b)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{nodeIDAnnotation: v}}})
		_, _ = k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		_ = k.updateCSINode(ctx, node, func(drivers []storagev1.CSINodeDriver) []storagev1.CSINodeDriver {
			return slices.DeleteFunc(drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == d })
		})
	}
}

// updateCSINode creates the node's CSINode (owned by the Node, as the
// kubelet makes it) or changes its drivers.
func (k *Kubelet) updateCSINode(ctx context.Context, node *corev1.Node, change func([]storagev1.CSINodeDriver) []storagev1.CSINodeDriver) error {
	api := k.cfg.Client.StorageV1().CSINodes()
	for range 5 {
		cn, err := api.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}}}
			cn.Spec.Drivers = change(nil)
			if _, err = api.Create(ctx, cn, metav1.CreateOptions{}); err == nil || !apierrors.IsAlreadyExists(err) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		cn.Spec.Drivers = change(cn.Spec.Drivers)
		if _, err = api.Update(ctx, cn, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("CSINode %s: too many conflicting updates", k.cfg.NodeName)
}

// csiPlugin is the driver's registered plugin on this node, if any.
func (k *Kubelet) csiPlugin(driver string) CSIPlugin {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.csi[driver].plugin
}

// StagingPath is where the kubelet has a CSI driver stage a volume on the
// node (csi_attacher.go makeDeviceMountPath: the driver's folder under
// plugins/kubernetes.io/csi, the SHA-256 of the volume handle, then
// "globalmount").
func StagingPath(windows bool, driver, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	p := containerruntime.KubeletRootDir(windows) + "/plugins/kubernetes.io/csi/" + driver + "/" + fmt.Sprintf("%x", sum) + "/globalmount"
	if windows {
		return strings.ReplaceAll(p, "/", `\`)
	}
	return p
}

// vaName is the VolumeAttachment the attach/detach controller creates for
// a CSI volume on a node (csi_attacher.go getAttachmentName).
func vaName(handle, driver, node string) string {
	sum := sha256.Sum256([]byte(handle + driver + node))
	return fmt.Sprintf("csi-%x", sum)
}

// mountVolumes is the volume manager's WaitForAttachAndMount for the pod's
// CSI volumes: each is reported in use, waited for until the
// attach/detach controller lists it attached on the node, staged once per
// node and published into the pod's folder. It returns what is not
// mounted yet ("" when all are) and records the kubelet's events on the
// way. Volumes of other kinds are left as they were (see containerruntime.Mounts).
func (k *Kubelet) mountVolumes(ctx context.Context, pod *corev1.Pod, run *podRun) (string, error) {
	windows := k.cfg.Host.OS == "windows"
	var unmounted, unattached, failed []string
	var errs []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		// A volume published for the pod stays so: a running pod's syncs
		// read nothing more for it.
		k.mu.Lock()
		published := run.volumes[v.Name] != nil
		k.mu.Unlock()
		if published {
			continue
		}
		pvc, err := k.cfg.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				return "", err
			}
			failed = append(failed, v.Name)
			errs = append(errs, fmt.Sprintf("error processing PVC %s/%s: failed to fetch PVC from API server: %v", pod.Namespace, v.PersistentVolumeClaim.ClaimName, err))
			continue
		}
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			failed = append(failed, v.Name)
			errs = append(errs, fmt.Sprintf("error processing PVC %s/%s: PVC is not bound", pod.Namespace, pvc.Name))
			continue
		}
		pv, err := k.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if pv.Spec.CSI == nil {
			// Not simulated: a PersistentVolume of another kind is taken
			// as attached and mounted.
			continue
		}
		driver, handle := pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
		vol := csiVolume{driver: driver, handle: handle, pv: pv.Name, uniq: "kubernetes.io/csi/" + driver + "^" + handle,
			staging: StagingPath(windows, driver, handle),
			target:  containerruntime.CSITargetPath(windows, pod, pv.Name)}
		if err := k.setVolumeInUse(ctx, vol.uniq, true); err != nil {
			return "", err
		}
		// Attach is the attach/detach controller's unless the driver
		// says it needs none (csi_plugin.go skipAttach: no CSIDriver
		// object means attach).
		attach := true
		if d, err := k.cfg.Client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{}); err == nil && d.Spec.AttachRequired != nil {
			attach = *d.Spec.AttachRequired
		}
		publish := map[string]string{}
		if attach {
			node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			if !slices.ContainsFunc(node.Status.VolumesAttached, func(a corev1.AttachedVolume) bool { return string(a.Name) == vol.uniq }) {
				unattached, unmounted = append(unattached, v.Name), append(unmounted, v.Name)
				continue
			}
			va, err := k.cfg.Client.StorageV1().VolumeAttachments().Get(ctx, vaName(handle, driver, k.cfg.NodeName), metav1.GetOptions{})
			if err != nil || !va.Status.Attached {
				msg := "volume attachment is being deleted"
				if err != nil {
					msg = err.Error()
				} else if va.Status.AttachError != nil {
					msg = va.Status.AttachError.Message
				}
				k.volumeEvent(ctx, pod, "FailedMount", fmt.Sprintf("MountVolume.WaitForAttach failed for volume %q : %s", pv.Name, msg))
				unmounted = append(unmounted, v.Name)
				continue
			}
			publish = va.Status.AttachmentMetadata
		}
		vol.plugin = k.csiPlugin(driver)
		if vol.plugin == nil {
			k.volumeEvent(ctx, pod, "FailedMount", fmt.Sprintf("MountVolume.MountDevice failed for volume %q : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name %s not found in the list of registered CSI drivers", pv.Name, driver))
			unmounted = append(unmounted, v.Name)
			continue
		}
		if !k.staged(vol.uniq) {
			if err := vol.plugin.NodeStageVolume(ctx, handle, publish, vol.staging); err != nil {
				k.volumeEvent(ctx, pod, "FailedMount", fmt.Sprintf("MountVolume.MountDevice failed for volume %q : %v", pv.Name, err))
				unmounted = append(unmounted, v.Name)
				continue
			}
			k.cfg.Logs.Write(vmdisk.Kubelet, "MountVolume.MountDevice succeeded for volume %q device mount path %q pod=%q", pv.Name, vol.staging, pod.Namespace+"/"+pod.Name)
		}
		readOnly := v.PersistentVolumeClaim.ReadOnly
		if err := vol.plugin.NodePublishVolume(ctx, handle, vol.staging, vol.target, readOnly); err != nil {
			k.volumeEvent(ctx, pod, "FailedMount", fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", pv.Name, err))
			unmounted = append(unmounted, v.Name)
			continue
		}
		k.cfg.Logs.Write(vmdisk.Kubelet, "MountVolume.SetUp succeeded for volume %q pod=%q", pv.Name, pod.Namespace+"/"+pod.Name)
		k.mu.Lock()
		run.volumes[v.Name] = &vol
		k.mu.Unlock()
	}
	if len(unmounted)+len(failed) == 0 {
		return "", nil
	}
	if run.volumesSince.IsZero() {
		run.volumesSince = time.Now()
	}
	sort := func(s []string) string { slices.Sort(s); return "[" + strings.Join(s, " ") + "]" }
	msg := fmt.Sprintf("unmounted volumes=%s, unattached volumes=%s, failed to process volumes=%s", sort(unmounted), sort(unattached), sort(failed))
	if len(errs) > 0 {
		msg += ": " + strings.Join(errs, "; ")
	}
	if time.Since(run.volumesSince) >= podAttachAndMountTimeout {
		k.volumeEvent(ctx, pod, "FailedMount", "Unable to attach or mount volumes: "+msg+": context deadline exceeded")
	}
	return msg, nil
}

// unmountVolumes unpublishes the pod's CSI volumes and unstages those no
// other pod of the node has published, then no longer reports them in
// use, so that the attach/detach controller may detach them.
func (k *Kubelet) unmountVolumes(ctx context.Context, run *podRun) {
	if run == nil {
		return
	}
	k.mu.Lock()
	vols := slices.Collect(maps.Values(run.volumes))
	run.volumes = map[string]*csiVolume{}
	k.mu.Unlock()
	for _, v := range vols {
		if err := v.plugin.NodeUnpublishVolume(ctx, v.handle, v.target); err != nil {
			k.cfg.Logs.Write(vmdisk.Kubelet, "UnmountVolume.TearDown failed for volume %q: %v", v.pv, err)
			continue
		}
		k.cfg.Logs.Write(vmdisk.Kubelet, "UnmountVolume.TearDown succeeded for volume %q", v.pv)
		if k.staged(v.uniq) {
			continue // another pod of the node still has it
		}
		if err := v.plugin.NodeUnstageVolume(ctx, v.handle, v.staging); err != nil {
			k.cfg.Logs.Write(vmdisk.Kubelet, "UnmountDevice failed for volume %q: %v", v.pv, err)
			continue
		}
		k.cfg.Logs.Write(vmdisk.Kubelet, "UnmountDevice succeeded for volume %q", v.pv)
		if err := k.setVolumeInUse(ctx, v.uniq, false); err != nil {
			k.cfg.Logs.Write(vmdisk.Kubelet, "reporting volume %q no longer in use: %v", v.pv, err)
		}
	}
}

// staged says whether a pod of the node has the volume published.
func (k *Kubelet) staged(uniq string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.runs {
		for _, v := range r.volumes {
			if v.uniq == uniq {
				return true
			}
		}
	}
	return false
}

// setVolumeInUse adds a volume to, or drops it from, the node status's
// volumesInUse, which the attach/detach controller reads before it
// detaches (kubelet_node_status.go setNodeVolumesInUseStatus).
func (k *Kubelet) setVolumeInUse(ctx context.Context, uniq string, inUse bool) error {
	k.mu.Lock()
	if k.inUse == nil {
		k.inUse = map[string]bool{}
	}
	if k.inUse[uniq] == inUse {
		k.mu.Unlock()
		return nil
	}
	if inUse {
		k.inUse[uniq] = true
	} else {
		delete(k.inUse, uniq)
	}
	names := slices.Sorted(maps.Keys(k.inUse))
	k.mu.Unlock()
	list := make([]corev1.UniqueVolumeName, 0, len(names))
	for _, n := range names {
		list = append(list, corev1.UniqueVolumeName(n))
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": list}})
	if err != nil {
		return err
	}
	_, err = k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		k.mu.Lock()
		if inUse {
			delete(k.inUse, uniq)
		} else {
			k.inUse[uniq] = true
		}
		k.mu.Unlock()
	}
	return err
}

// volumeEvent records a volume event once per message: the kubelet repeats
// its FailedMount events as the reason changes.
func (k *Kubelet) volumeEvent(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	k.eventKeyed(ctx, pod, string(pod.UID)+"/"+reason+"/"+msg, corev1.EventTypeWarning, reason, msg)
}
