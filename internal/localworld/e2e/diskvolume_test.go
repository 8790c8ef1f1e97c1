//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// checkDiskVolume is seed 003's claim on a Windows node, through the
// Azure Disk CSI driver the add-on installs as CAPZ clusters run it: the
// claim of class managed-csi waits for its pod, the driver's controller
// creates the managed disk in Azure and attaches it to the node's VM at
// LUN 0, the Windows node plugin finds it there and the kubelet mounts it
// into the pod; what the pod writes is on the disk, which is detached when
// the pod goes and attached again for the next one, and deleted from Azure
// with the claim.
func checkDiskVolume(ctx context.Context, t *testing.T, w *localworld.World, start time.Time) {
	t.Helper()
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/os=windows"})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("the Windows node: %v (%d)", err, len(nodes.Items))
	}
	node := nodes.Items[0]
	// The driver's node plugin registered on the Windows node.
	poll.Until(t, 3*time.Minute, func() string {
		cn, err := cs.StorageV1().CSINodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == "disk.csi.azure.com" && d.NodeID == node.Name && d.Allocatable != nil && ptr.Deref(d.Allocatable.Count, 0) > 0 {
				return ""
			}
		}
		return fmt.Sprintf("CSINode %s drivers %+v", node.Name, cn.Spec.Drivers)
	})
	if _, err := cs.CoreV1().PersistentVolumeClaims("seeds").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("managed-csi"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	withClaim := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeSelector: map[string]string{"beta.kubernetes.io/os": "windows"},
			Containers: []corev1.Container{{Name: "app", Image: "mcr.microsoft.com/windows/servercore:ltsc2022",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: `C:\data`}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	}
	running := func(name string) {
		t.Helper()
		poll.Until(t, 4*time.Minute, func() string {
			p, err := cs.CoreV1().Pods("seeds").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if p.Status.Phase != corev1.PodRunning {
				evs, _ := cs.CoreV1().Events("seeds").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
				var seen []string
				for _, e := range evs.Items {
					seen = append(seen, e.Reason+": "+e.Message)
				}
				return fmt.Sprintf("pod %s %s on %q, events %q", name, p.Status.Phase, p.Spec.NodeName, seen)
			}
			return ""
		})
	}
	if _, err := cs.CoreV1().Pods("seeds").Create(ctx, withClaim("disk-writer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running("disk-writer")
	t.Logf("%6.1fs a Windows pod runs with its Azure disk claim", time.Since(start).Seconds())

	pvc, err := cs.CoreV1().PersistentVolumeClaims("seeds").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != "disk.csi.azure.com" {
		t.Fatalf("the claim's volume %s: %v %+v", pvc.Spec.VolumeName, err, pv.Spec)
	}
	diskID := pv.Spec.CSI.VolumeHandle
	// Azure: the disk the driver created, attached to the node's VM.
	acfg, err := w.AsServicePrincipal()
	if err != nil {
		t.Fatal(err)
	}
	disks, err := endpoint.NewClient(acfg, localworld.Subscription, armcompute.NewDisksClient)
	if err != nil {
		t.Fatal(err)
	}
	vms, err := endpoint.NewClient(acfg, localworld.Subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	did, err := arm.ParseResourceID(diskID)
	if err != nil {
		t.Fatalf("volume handle %q: %v", diskID, err)
	}
	vmID, err := arm.ParseResourceID(strings.TrimPrefix(node.Spec.ProviderID, "azure://"))
	if err != nil {
		t.Fatalf("provider ID %q: %v", node.Spec.ProviderID, err)
	}
	managedBy := func() string {
		d, err := disks.Get(ctx, did.ResourceGroupName, did.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Tags["k8s-azure-created-by"] == nil || *d.Tags["k8s-azure-created-by"] != "kubernetes-azure-dd" || ptr.Deref(d.Properties.DiskSizeGB, 0) != 5 {
			t.Errorf("disk %s: tags %v, size %v", did.Name, d.Tags, d.Properties.DiskSizeGB)
		}
		return ptr.Deref(d.ManagedBy, "")
	}
	if got := managedBy(); !strings.EqualFold(got, vmID.String()) {
		t.Errorf("disk %s is managed by %q, want the node's VM %s", did.Name, got, vmID)
	}
	vm, err := vms.Get(ctx, vmID.ResourceGroupName, vmID.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	lun0 := false
	for _, d := range vm.Properties.StorageProfile.DataDisks {
		lun0 = lun0 || ptr.Deref(d.Lun, -1) == 0 && d.ManagedDisk != nil && strings.EqualFold(ptr.Deref(d.ManagedDisk.ID, ""), diskID)
	}
	if !lun0 {
		t.Errorf("VM %s's data disks do not hold %s at LUN 0", vmID.Name, diskID)
	}
	exec := func(pod string, cmd ...string) string {
		t.Helper()
		out, errs, err := testenv.Exec(ctx, cfg, cs, "seeds", pod, "app", cmd, "")
		if err != nil {
			t.Fatalf("exec %s %q: %v (%s)", pod, cmd, err, errs)
		}
		return out
	}
	exec("disk-writer", "powershell", "-Command", `Set-Content -Path C:\data\hello.txt -Value kept-on-the-disk`)

	// The pod goes: the disk is detached from the VM.
	if err := cs.CoreV1().Pods("seeds").Delete(ctx, "disk-writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, func() string {
		if by := managedBy(); by != "" {
			return "disk still attached to " + by
		}
		return ""
	})
	t.Logf("%6.1fs the disk is detached once its pod is gone", time.Since(start).Seconds())
	if _, err := cs.CoreV1().Pods("seeds").Create(ctx, withClaim("disk-reader"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running("disk-reader")
	if out := exec("disk-reader", "cmd", "/c", `type C:\data\hello.txt`); !strings.Contains(out, "kept-on-the-disk") {
		t.Errorf("the next pod reads %q from the disk", out)
	}
	t.Logf("%6.1fs the next pod reads what the first wrote", time.Since(start).Seconds())

	// The claim goes: its disk is deleted from Azure.
	if err := cs.CoreV1().Pods("seeds").Delete(ctx, "disk-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().PersistentVolumeClaims("seeds").Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 4*time.Minute, func() string {
		for _, id := range w.Emulator().ResourceIDs() {
			if strings.EqualFold(id, diskID) {
				return "disk " + id + " is still in Azure"
			}
		}
		if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err == nil {
			return "volume " + pv.Name + " is still there"
		}
		return ""
	})
	t.Logf("%6.1fs the claim's disk is deleted from Azure", time.Since(start).Seconds())
}
