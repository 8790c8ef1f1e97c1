package azuredisk_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

const (
	sub      = "00000000-0000-0000-0000-0000000000dd"
	rg       = "disks-rg"
	location = "westeurope"
	token    = "azuredisk-test"
)

var (
	env   *testenv.Env
	armEP endpoint.Config
)

// TestMain runs a workload cluster's API server (envtest) and the ARM
// emulator, which the controller reaches through the real SDK.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		srv, err := arm.New(arm.Options{Token: token, PollInterval: 10 * time.Millisecond, Seed: 1})
		if err == nil {
			err = srv.Start("127.0.0.1:0")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Close()
		armEP = endpoint.Config{ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken(token),
			Retry: &policy.RetryOptions{MaxRetries: 5, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: time.Second}}
		return testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e })
	}())
}

func connection() (azcore.TokenCredential, *azarm.ClientOptions, error) {
	opts, err := armEP.ClientOptions()
	return armEP.Credential, opts, err
}

// tt is the running test, for done, which takes a call's results whole.
var tt *testing.T

func done[T any](p *runtime.Poller[T], err error) T {
	t := tt
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.PollUntilDone(context.Background(), &runtime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newVM makes the resource group, a network and a VM, as CAPZ leaves them
// for a node.
func newVM(t *testing.T, ctx context.Context, compute *armcompute.ClientFactory, name string) string {
	t.Helper()
	tt = t
	opts, _ := armEP.ClientOptions()
	groups, _ := armresources.NewResourceGroupsClient(sub, armEP.Credential, opts)
	if _, err := groups.CreateOrUpdate(ctx, rg, armresources.ResourceGroup{Location: to.Ptr(location)}, nil); err != nil {
		t.Fatal(err)
	}
	net, _ := armnetwork.NewClientFactory(sub, armEP.Credential, opts)
	vnet := done(net.NewVirtualNetworksClient().BeginCreateOrUpdate(ctx, rg, "vnet", armnetwork.VirtualNetwork{
		Location: to.Ptr(location),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}},
			Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.0/24")}}},
		},
	}, nil))
	nic := done(net.NewInterfacesClient().BeginCreateOrUpdate(ctx, rg, name+"-nic", armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name:       to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: vnet.Properties.Subnets[0].ID}},
		}}},
	}, nil))
	v := done(compute.NewVirtualMachinesClient().BeginCreateOrUpdate(ctx, rg, name, armcompute.VirtualMachine{
		Location: to.Ptr(location),
		Properties: &armcompute.VirtualMachineProperties{
			HardwareProfile: &armcompute.HardwareProfile{VMSize: to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_D2s_v3"))},
			StorageProfile: &armcompute.StorageProfile{
				ImageReference: &armcompute.ImageReference{Publisher: to.Ptr("cncf-upstream"), Offer: to.Ptr("capi"), SKU: to.Ptr("ubuntu-2204-gen1"), Version: to.Ptr("latest")},
				OSDisk:         &armcompute.OSDisk{CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage), DiskSizeGB: to.Ptr[int32](128)},
			},
			OSProfile: &armcompute.OSProfile{
				ComputerName: to.Ptr(name), AdminUsername: to.Ptr("capi"), CustomData: to.Ptr(base64.StdEncoding.EncodeToString([]byte("#cloud-config"))),
				LinuxConfiguration: &armcompute.LinuxConfiguration{DisablePasswordAuthentication: to.Ptr(true),
					SSH: &armcompute.SSHConfiguration{PublicKeys: []*armcompute.SSHPublicKey{{Path: to.Ptr("/home/capi/.ssh/authorized_keys"), KeyData: to.Ptr("ssh-ed25519 AAAA test")}}}},
			},
			NetworkProfile: &armcompute.NetworkProfile{NetworkInterfaces: []*armcompute.NetworkInterfaceReference{{ID: nic.ID}}},
		},
	}, nil))
	return *v.ID
}

// role tells the controller pod's containers apart by image, as the
// runtime's registry does.
func role(c corev1.Container) string {
	switch {
	case strings.Contains(c.Image, "/azuredisk-csi:"):
		return azuredisk.RoleDriver
	case strings.Contains(c.Image, "/csi-provisioner:"):
		return azuredisk.RoleProvisioner
	case strings.Contains(c.Image, "/csi-attacher:"):
		return azuredisk.RoleAttacher
	}
	return ""
}

// azureJSON is the cloud config CAPZ writes to the control-plane node.
const azureJSON = `{"cloud":"AzurePublicCloud","tenantId":"t","subscriptionId":"` + sub + `","aadClientId":"id","aadClientSecret":"secret",
"resourceGroup":"` + rg + `","location":"West Europe","vmType":"standard","useInstanceMetadata":true}`

// vaName is the attach/detach controller's name for an attachment
// (kubernetes pkg/volume/csi getAttachmentName).
func vaName(handle, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+azuredisk.DriverName+node)))
}

func events(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, reason string) []string {
	t.Helper()
	l, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Message)
	}
	return out
}

// TestDiskLifecycle plays the PV binder and the attach/detach controller
// (no kube-controller-manager runs in envtest) against the controller:
// claims become disks and PVs, attachments data disks at LUN 0 and 1,
// detaching frees the disk, and a Released PV's disk is deleted once no VM
// holds it.
func TestDiskLifecycle(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	copts, _ := armEP.ClientOptions()
	compute, err := armcompute.NewClientFactory(sub, armEP.Credential, copts)
	if err != nil {
		t.Fatal(err)
	}
	vmID := newVM(t, ctx, compute, "node-a")

	c := azuredisk.StartController(azuredisk.ControllerConfig{
		Client: cs, Role: role, Log: testr.New(t),
		ReadNodeFile: func(node, path string) ([]byte, error) {
			if node == "cp" && path == "/etc/kubernetes/azure.json" {
				return []byte(azureJSON), nil
			}
			return nil, os.ErrNotExist
		},
		Connect: machines.ARMCompute(connection),
	})
	t.Cleanup(c.Stop)

	// Nodes as the kubelet and the cloud node manager leave them: node-a
	// runs the node plugin (its CSINode lists the driver), node-b not.
	for _, n := range []string{"node-a", "node-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{azuredisk.TopologyKey: ""}},
			Spec: corev1.NodeSpec{ProviderID: "azure://" + strings.Replace(vmID, "node-a", n, 1)}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n == "node-a" {
			cn.Spec.Drivers = []storagev1.CSINodeDriver{{Name: azuredisk.DriverName, NodeID: n, TopologyKeys: []string{azuredisk.TopologyKey}}}
		}
		if _, err := cs.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wffc, del := storagev1.VolumeBindingWaitForFirstConsumer, corev1.PersistentVolumeReclaimDelete
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "managed-csi"},
		Provisioner: azuredisk.DriverName, Parameters: map[string]string{"skuName": "StandardSSD_LRS"},
		ReclaimPolicy: &del, VolumeBindingMode: &wffc}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The controller pod, as the chart's csi-azuredisk-controller runs it.
	if c.Active() {
		t.Fatal("active with no controller pod")
	}
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-azuredisk-controller-x1"},
		Spec: corev1.PodSpec{NodeName: "cp", HostNetwork: true, Containers: []corev1.Container{
			{Name: "csi-provisioner", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner:v6.3.0"},
			{Name: "csi-attacher", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher:v4.12.0"},
			{Name: "azuredisk", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5",
				Args: []string{"--v=5", "--endpoint=$(CSI_ENDPOINT)", "--drivername=disk.csi.azure.com",
					"--cloud-config-secret-name=azure-cloud-provider", "--cloud-config-secret-namespace=kube-system"}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() string {
		if !c.Active() {
			return "controller not active"
		}
		return ""
	})

	// Claims, annotated as the PV controller and the scheduler do.
	claim := func(name, size, node string) *corev1.PersistentVolumeClaim {
		t.Helper()
		pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
				"volume.kubernetes.io/storage-provisioner": azuredisk.DriverName, "volume.kubernetes.io/selected-node": node}},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: to.Ptr("managed-csi"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	waitPV := func(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
		t.Helper()
		var pv *corev1.PersistentVolume
		poll.Until(t, time.Minute, func() string {
			var err error
			if pv, err = cs.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err != nil {
				return err.Error()
			}
			return ""
		})
		return pv
	}
	pvc1, pvc2 := claim("data", "5Gi", "node-a"), claim("logs", "1500Mi", "node-a")
	pv1, pv2 := waitPV(pvc1), waitPV(pvc2)

	// The PV as external-provisioner writes it.
	if pv1.Annotations["pv.kubernetes.io/provisioned-by"] != azuredisk.DriverName || !slices.Contains(pv1.Finalizers, "external-provisioner.volume.kubernetes.io/finalizer") {
		t.Errorf("PV metadata: annotations %v finalizers %v", pv1.Annotations, pv1.Finalizers)
	}
	if q := pv1.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 5<<30 {
		t.Errorf("PV capacity %s, want 5Gi", q.String())
	}
	if pv1.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv1.Spec.StorageClassName != "managed-csi" ||
		pv1.Spec.ClaimRef == nil || pv1.Spec.ClaimRef.UID != pvc1.UID || !slices.Equal(pv1.Spec.AccessModes, pvc1.Spec.AccessModes) {
		t.Errorf("PV spec: %+v", pv1.Spec)
	}
	csi := pv1.Spec.CSI
	wantID := "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/disks/" + pv1.Name
	if csi == nil || csi.Driver != azuredisk.DriverName || !strings.EqualFold(csi.VolumeHandle, wantID) ||
		csi.VolumeAttributes["requestedsizegib"] != "5" || csi.VolumeAttributes["skuName"] != "StandardSSD_LRS" ||
		csi.VolumeAttributes["csi.storage.k8s.io/pvc/name"] != "data" || !strings.HasSuffix(csi.VolumeAttributes["storage.kubernetes.io/csiProvisionerIdentity"], "-"+azuredisk.DriverName) {
		t.Fatalf("PV CSI source: %+v", csi)
	}
	na := pv1.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 ||
		fmt.Sprint(na.Required.NodeSelectorTerms[0].MatchExpressions) != fmt.Sprint([]corev1.NodeSelectorRequirement{{Key: azuredisk.TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{""}}}) {
		t.Errorf("PV node affinity: %+v", na)
	}
	// The success event is written after the PV is saved, so it can trail
	// the PV waited for above.
	poll.Until(t, 30*time.Second, func() string {
		if ev := events(t, ctx, cs, "default", "data", "ProvisioningSucceeded"); !slices.Contains(ev, "Successfully provisioned volume "+pv1.Name) {
			return fmt.Sprintf("ProvisioningSucceeded events %q", ev)
		}
		if ev := events(t, ctx, cs, "default", "data", "Provisioning"); !slices.Contains(ev, `External provisioner is provisioning volume for claim "default/data"`) {
			return fmt.Sprintf("Provisioning events %q", ev)
		}
		return ""
	})

	// The disks as the driver created them.
	disks := compute.NewDisksClient()
	d1, err := disks.Get(ctx, rg, pv1.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *d1.Properties.DiskSizeGB != 5 || *d1.SKU.Name != armcompute.DiskStorageAccountTypesStandardSSDLRS || len(d1.Zones) != 0 ||
		*d1.Tags["k8s-azure-created-by"] != "kubernetes-azure-dd" || *d1.Tags["kubernetes.io-created-for-pvc-name"] != "data" ||
		*d1.Tags["kubernetes.io-created-for-pvc-namespace"] != "default" || *d1.Tags["kubernetes.io-created-for-pv-name"] != pv1.Name {
		t.Errorf("disk %+v", d1)
	}
	if d2, err := disks.Get(ctx, rg, pv2.Name, nil); err != nil || *d2.Properties.DiskSizeGB != 2 {
		t.Errorf("1500Mi rounds up to 2 GiB: %v %v", d2.Properties, err)
	}

	// A claim for a node without the node plugin.
	pvc3 := claim("orphan", "1Gi", "node-b")
	want := `failed to provision volume with StorageClass "managed-csi": error generating accessibility requirements: no topology key found for node node-b`
	poll.Until(t, 30*time.Second, func() string {
		if ev := events(t, ctx, cs, "default", pvc3.Name, "ProvisioningFailed"); !slices.Contains(ev, want) {
			return fmt.Sprintf("ProvisioningFailed events %q", ev)
		}
		return ""
	})

	// Attachments, as the attach/detach controller creates them.
	attach := func(pv *corev1.PersistentVolume, node string) string {
		t.Helper()
		name := vaName(pv.Spec.CSI.VolumeHandle, node)
		_, err := cs.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: azuredisk.DriverName, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: to.Ptr(pv.Name)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	attached := func(name, lun string) {
		t.Helper()
		poll.Until(t, time.Minute, func() string {
			va, err := cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if !va.Status.Attached {
				return fmt.Sprintf("not attached: %+v", va.Status.AttachError)
			}
			if va.Status.AttachmentMetadata["LUN"] != lun || !slices.Contains(va.Finalizers, "external-attacher/disk-csi-azure-com") {
				t.Fatalf("attached with metadata %v finalizers %v, want LUN %s", va.Status.AttachmentMetadata, va.Finalizers, lun)
			}
			return ""
		})
	}
	va1 := attach(pv1, "node-a")
	attached(va1, "0")
	va2 := attach(pv2, "node-a")
	attached(va2, "1")
	got, err := compute.NewVirtualMachinesClient().Get(ctx, rg, "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	var luns []string
	for _, d := range got.Properties.StorageProfile.DataDisks {
		luns = append(luns, fmt.Sprintf("%d:%s:%s", *d.Lun, *d.Name, *d.Caching))
	}
	if want := []string{"0:" + pv1.Name + ":ReadOnly", "1:" + pv2.Name + ":ReadOnly"}; !slices.Equal(luns, want) {
		t.Errorf("VM data disks %v, want %v", luns, want)
	}
	if d, _ := disks.Get(ctx, rg, pv1.Name, nil); d.ManagedBy == nil || !strings.EqualFold(*d.ManagedBy, vmID) {
		t.Errorf("disk managedBy %v, want %s", d.ManagedBy, vmID)
	}

	// An attachment to a node whose CSINode lacks the driver.
	vaB := attach(pv2, "node-b")
	poll.Until(t, 30*time.Second, func() string {
		va, err := cs.StorageV1().VolumeAttachments().Get(ctx, vaB, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if va.Status.AttachError == nil || va.Status.AttachError.Message != "CSINode node-b does not contain driver disk.csi.azure.com" {
			return fmt.Sprintf("attachError %+v", va.Status.AttachError)
		}
		if va.Status.Attached || len(va.Finalizers) > 0 {
			t.Fatalf("a failed attach left attached=%v finalizers %v", va.Status.Attached, va.Finalizers)
		}
		return ""
	})
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, vaB, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The claim is gone: the PV binder releases its PV, whose disk is
	// still on the VM; the driver refuses to delete it.
	if pv1, err = cs.CoreV1().PersistentVolumes().Get(ctx, pv1.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pv1.Finalizers, "external-attacher/disk-csi-azure-com") {
		t.Errorf("attached PV's finalizers %v lack external-attacher's", pv1.Finalizers)
	}
	pv1.Status.Phase = corev1.VolumeReleased
	if _, err := cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := fmt.Sprintf("rpc error: code = Unknown desc = disk(%s) already attached to node(%s), could not be deleted", csi.VolumeHandle, vmID)
	poll.Until(t, 30*time.Second, func() string {
		ev := events(t, ctx, cs, "default", pv1.Name, "VolumeFailedDelete")
		if !slices.ContainsFunc(ev, func(m string) bool { return strings.EqualFold(m, refused) }) {
			return fmt.Sprintf("VolumeFailedDelete events %q, want %q", ev, refused)
		}
		return ""
	})

	// The pod is gone: the attach/detach controller deletes the
	// attachment; the disk is detached and then deleted with its PV.
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, va1, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := cs.StorageV1().VolumeAttachments().Get(ctx, va1, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("attachment still there (%v)", err)
		}
		return ""
	})
	got, err = compute.NewVirtualMachinesClient().Get(ctx, rg, "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if dd := got.Properties.StorageProfile.DataDisks; len(dd) != 1 || *dd[0].Lun != 1 {
		t.Errorf("after detaching LUN 0 the VM has %d data disks", len(dd))
	}
	poll.Until(t, time.Minute, func() string {
		_, err := disks.Get(ctx, rg, pv1.Name, nil)
		var re *azcore.ResponseError
		if err == nil || !errors.As(err, &re) || re.StatusCode != 404 {
			return fmt.Sprintf("disk still there (%v)", err)
		}
		// Deleted, held only by the API server's pv-protection finalizer,
		// which kube-controller-manager's pv-protection controller lifts.
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv1.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err.Error()
		}
		if err == nil && (pv.DeletionTimestamp == nil || slices.ContainsFunc(pv.Finalizers, func(f string) bool { return f != "kubernetes.io/pv-protection" })) {
			return fmt.Sprintf("PV not deleted: finalizers %v, deleted %v", pv.Finalizers, pv.DeletionTimestamp)
		}
		return ""
	})
	if d, err := disks.Get(ctx, rg, pv2.Name, nil); err != nil || d.ManagedBy == nil {
		t.Errorf("the other disk lost its VM: %v", err)
	}
}
