package azuredisk_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/poll"
)

// attached is what Azure has attached to the test's VM, which the test
// changes as ARM would.
type attached struct {
	mu    sync.Mutex
	disks []arm.DataDisk
}

func (a *attached) get() []arm.DataDisk {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.disks)
}

func (a *attached) set(d ...arm.DataDisk) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disks = d
}

// A Windows pod's claim, bound to an Azure disk, goes the way a kubelet
// takes it: reported in use, waited for until attached, refused while no
// node plugin of the driver is registered, refused while the disk is not
// at the LUN the attachment says, then staged and published into the pod's
// folder, where what the pod writes lands on the disk; when the pod goes
// the volume is unpublished, unstaged and no longer in use, and the disk
// keeps what was written.
func TestWindowsPodMountsAttachedDisk(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	// The package's API server, in a namespace of its own (its Node,
	// win-a, and the driver's CSIDriver are its own too): an API server
	// of its own cost about 3 CPU-s.
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mountsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.PushAll(ctx, registry.Catalog("v1.36.3", nil)); err != nil {
		t.Fatal(err)
	}
	block, err := hostnet.ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(block.Release)

	const node, diskID = "win-a", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pvc-1"
	disk := vmdisk.Disk{Root: t.TempDir(), Windows: true}
	store := t.TempDir()
	azure := &attached{}
	plugin := azuredisk.NewNodePlugin(azuredisk.NodeConfig{NodeName: node, Windows: true, VMSize: "Standard_D2s_v3", Location: "eastus",
		Disk: disk, DataDisks: azure.get, Store: store})
	k, err := kubelet.Start(ctx, kubelet.Config{
		NodeName: node, Client: cs, ClientCA: env.KubeletClientCA, Address: block.Hosts.Addr().Next(), Images: reg, Disk: disk, Log: logr.Discard(),
		Host:              kubelet.Host{OS: "windows", Arch: "amd64", Build: "10.0.20348", KubeletVersion: "v1.36.3", Runtime: "containerd"},
		Labels:            map[string]string{corev1.LabelOSStable: "windows"},
		NodeInfo:          corev1.NodeSystemInfo{OperatingSystem: "windows", OSImage: "Windows Server 2022 Datacenter", KernelVersion: "10.0.20348.2849"},
		Capacity:          corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("30")},
		NetworkConfigured: func() bool { return true },
		// The driver's node pod: the runtime tells it by its images.
		CSIPlugin: func(p *corev1.Pod) (string, kubelet.CSIPlugin) {
			if p.Name == "csi-azuredisk-node-win" {
				return azuredisk.DriverName, plugin
			}
			return "", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.2.0/24","podCIDRs":["10.244.2.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The claim, bound to its disk's volume as the PV controller binds.
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: azuredisk.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().CSIDrivers().Delete(context.Background(), azuredisk.DriverName, metav1.DeleteOptions{})
	})
	pvc, err := cs.CoreV1().PersistentVolumeClaims(mountsNS).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "pvc-1",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"},
		Spec: corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			ClaimRef:               &corev1.ObjectReference{Namespace: mountsNS, Name: "data", UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: azuredisk.DriverName, VolumeHandle: diskID}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if _, err := cs.CoreV1().PersistentVolumeClaims(mountsNS).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	servercore := func(name string, vols []corev1.Volume, mounts []corev1.VolumeMount) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mountsNS}, Spec: corev1.PodSpec{NodeName: node, Volumes: vols,
			Containers: []corev1.Container{{Name: "c", Image: "mcr.microsoft.com/windows/servercore:ltsc2022", VolumeMounts: mounts}}}}
	}
	if _, err := cs.CoreV1().Pods(mountsNS).Create(ctx, servercore("app",
		[]corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: `C:\data`}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const uniq = "kubernetes.io/csi/" + azuredisk.DriverName + "^" + diskID
	nodeStatus := func() corev1.NodeStatus {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Status
	}
	// Not attached: in use, waiting.
	poll.Until(t, time.Minute, func() string {
		if s := nodeStatus(); !slices.Contains(s.VolumesInUse, uniq) {
			return fmt.Sprintf("volumesInUse %v", s.VolumesInUse)
		}
		return podWaiting(ctx, cs, "app")
	})

	// The attach/detach controller's part: the attachment, then the node
	// status. The driver has no node plugin here yet.
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("csi-%x", sha256.Sum256([]byte(diskID+azuredisk.DriverName+node)))},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: azuredisk.DriverName, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pvc-1")}}}
	va, err = cs.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"LUN": "0"}}
	if _, err := cs.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, node, []byte(`{"status":{"volumesAttached":[{"name":"`+uniq+`","devicePath":""}]}}`)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ctx, cs, "app", "FailedMount", `MountVolume.MountDevice failed for volume "pvc-1" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name disk.csi.azure.com not found in the list of registered CSI drivers`)

	// The driver's node pod registers it: the CSINode entry the scheduler
	// and the attacher read.
	if _, err := cs.CoreV1().Pods(mountsNS).Create(ctx, servercore("csi-azuredisk-node-win", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		cn, err := cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == azuredisk.DriverName && d.NodeID == node && slices.Equal(d.TopologyKeys, []string{azuredisk.TopologyKey}) &&
				d.Allocatable != nil && ptr.Deref(d.Allocatable.Count, 0) == 4 {
				return ""
			}
		}
		return fmt.Sprintf("CSINode drivers %+v", cn.Spec.Drivers)
	})
	// Azure has not attached anything at LUN 0 yet.
	waitEvent(t, ctx, cs, "app", "FailedMount", "failed to find disk on lun 0")
	azure.set(arm.DataDisk{LUN: 0, Name: "pvc-1", ID: diskID, UniqueID: "3d5c1b0e-0000-4000-8000-000000000001", SizeGB: 5})
	poll.Until(t, time.Minute, func() string {
		p, err := cs.CoreV1().Pods(mountsNS).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if p.Status.Phase != corev1.PodRunning {
			return string(p.Status.Phase)
		}
		return ""
	})
	pod, err := cs.CoreV1().Pods(mountsNS).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The container's mount is the disk: a write through the pod's
	// volume folder is on the disk.
	target := containerruntime.CSITargetPath(true, pod, "pvc-1")
	staging := kubelet.StagingPath(true, azuredisk.DriverName, diskID)
	if !strings.HasPrefix(staging, `C:\var\lib\kubelet\plugins\kubernetes.io\csi\disk.csi.azure.com\`) || !strings.HasSuffix(staging, `\globalmount`) {
		t.Errorf("staging path %s", staging)
	}
	mounts, err := containerruntime.Mounts(ctx, cs, disk, pod, pod.Spec.Containers[0])
	if err != nil || len(mounts) == 0 || mounts[0].HostDir != target {
		t.Fatalf("the container's mounts %+v (%v), want C:\\data at %s", mounts, err, target)
	}
	hp, err := disk.HostPath(target + `\hello.txt`)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hp, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	onDisk := filepath.Join(store, "3d5c1b0e-0000-4000-8000-000000000001", "hello.txt")
	if b, err := os.ReadFile(onDisk); err != nil || string(b) != "kept" {
		t.Fatalf("the disk's contents: %q %v", b, err)
	}

	// The pod goes: unpublished, unstaged, no longer in use; the disk
	// keeps what was written.
	if err := cs.CoreV1().Pods(mountsNS).Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if s := nodeStatus(); len(s.VolumesInUse) != 0 {
			return fmt.Sprintf("volumesInUse %v", s.VolumesInUse)
		}
		for _, p := range []string{target, staging} {
			if h, _ := disk.HostPath(p); exists(h) {
				return p + " is still mounted"
			}
		}
		return ""
	})
	if b, err := os.ReadFile(onDisk); err != nil || string(b) != "kept" {
		t.Fatalf("the disk's contents after the pod: %q %v", b, err)
	}
}

// mountsNS is TestWindowsPodMountsAttachedDisk's namespace.
const mountsNS = "mounts"

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func podWaiting(ctx context.Context, cs kubernetes.Interface, name string) string {
	p, err := cs.CoreV1().Pods(mountsNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason == "ContainerCreating" {
			return ""
		}
	}
	return fmt.Sprintf("pod %s: %s %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
}

func waitEvent(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod, reason, text string) {
	t.Helper()
	poll.Until(t, time.Minute, func() string {
		evs, err := cs.CoreV1().Events(mountsNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
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
		return fmt.Sprintf("no %s event with %q: %q", reason, text, seen)
	})
}
