package azuredisk_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/azuredisk"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/poll"
)

// renderedControllerRBAC applies the Azure Disk CSI add-on's
// ServiceAccounts, ClusterRoles and bindings as winkube renders them,
// and returns the controller's ServiceAccount name.
func renderedControllerRBAC(t *testing.T, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	objs, err := flavors.Generate(flavors.Default, flavors.Options{
		ClusterName: "rights", KubernetesVersion: "v1.36.3", WindowsVersion: infrav1.WindowsServer2022, LinuxNodes: 1,
		Location: "westeurope", SubscriptionID: sub, AzureDiskCSI: true,
		SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test",
	})
	if err != nil {
		t.Fatal(err)
	}
	var data string
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasSuffix(cm.Name, "-azuredisk-csi") {
			for _, v := range cm.Data {
				data = v
			}
		}
	}
	sa := ""
	for _, doc := range strings.Split(data, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ServiceAccount":
			o := &corev1.ServiceAccount{}
			mustUnmarshal(t, doc, o)
			if strings.Contains(o.Name, "controller") {
				sa = o.Name
			}
			if _, err := cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case "ClusterRole":
			o := &rbacv1.ClusterRole{}
			mustUnmarshal(t, doc, o)
			if _, err := cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case "ClusterRoleBinding":
			o := &rbacv1.ClusterRoleBinding{}
			mustUnmarshal(t, doc, o)
			if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sa == "" {
		t.Fatal("the rendered add-on has no controller ServiceAccount")
	}
	return sa
}

func mustUnmarshal(t *testing.T, doc string, o any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(doc), o); err != nil {
		t.Fatal(err)
	}
}

// setRule replaces the verbs a ClusterRole grants on one resource
// (removing the rule when verbs is empty), and says what it had.
func setRule(t *testing.T, ctx context.Context, cs kubernetes.Interface, role, resource string, verbs []string) []string {
	t.Helper()
	cr, err := cs.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var had []string
	var kept []rbacv1.PolicyRule
	for _, r := range cr.Rules {
		if len(r.Resources) == 1 && r.Resources[0] == resource {
			had = r.Verbs
			continue
		}
		kept = append(kept, r)
	}
	if len(verbs) > 0 {
		group := ""
		if strings.HasPrefix(resource, "volumeattachments") {
			group = "storage.k8s.io"
		}
		kept = append(kept, rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs})
	}
	cr.Rules = kept
	if _, err := cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return had
}

// TestControllerActsWithItsPodsRights: the controller's sidecars write
// what they write (PVs, VolumeAttachments and their status, events) with
// the controller pod's ServiceAccount token, under the chart's RBAC as
// winkube renders it. With the attacher's rule for
// volumeattachments/status removed, the API server refuses the attacher
// and the attachment is never marked attached (the disk lands on the VM,
// the kubelet never learns it); with the rule back, it is.
func TestControllerActsWithItsPodsRights(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	copts, _ := armEP.ClientOptions()
	compute, err := armcompute.NewClientFactory(sub, armEP.Credential, copts)
	if err != nil {
		t.Fatal(err)
	}
	// Controller pods other tests left: the oldest Ready one would act.
	if pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			_ = cs.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
	sa := renderedControllerRBAC(t, ctx, cs)
	vmID := newVM(t, ctx, compute, "node-r")
	logs := make(chan string, 1000)
	// The provisioner's informers, listed with the pod's token (the
	// machine runtime runs them as the catalog's session of the
	// csi-provisioner container).
	var provisioner *startneeds.Session
	var provisionerMu sync.Mutex
	c := azuredisk.StartController(azuredisk.ControllerConfig{
		Synced: func(p *corev1.Pod, role string) (bool, string) {
			provisionerMu.Lock()
			defer provisionerMu.Unlock()
			if role != azuredisk.RoleProvisioner || provisioner == nil {
				return true, ""
			}
			ns := provisioner.NotSynced()
			return ns == "", ns
		},
		Client: cs, Role: role,
		Log: funcr.New(func(prefix, args string) {
			select {
			case logs <- args:
			default:
			}
		}, funcr.Options{Verbosity: 1}),
		ReadNodeFile: func(node, path string) ([]byte, error) { return []byte(azureJSON), nil },
		Connect:      machines.ARMCompute(connection),
		PodClient: func(p *corev1.Pod) (kubernetes.Interface, error) {
			tr, err := cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
			}}, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			cfg := rest.AnonymousClientConfig(env.Config)
			cfg.BearerToken = tr.Status.Token
			return kubernetes.NewForConfig(cfg)
		},
	})
	t.Cleanup(c.Stop)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-r", Labels: map[string]string{azuredisk.TopologyKey: ""}},
		Spec: corev1.NodeSpec{ProviderID: "azure://" + vmID}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-r"},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: azuredisk.DriverName, NodeID: "node-r", TopologyKeys: []string{azuredisk.TopologyKey}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-azuredisk-controller-rights"},
		Spec: corev1.PodSpec{NodeName: "node-r", HostNetwork: true, ServiceAccountName: sa, Containers: []corev1.Container{
			{Name: "csi-provisioner", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner:v6.3.0"},
			{Name: "csi-attacher", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher:v4.12.0"},
			{Name: "azuredisk", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5", Args: []string{"--drivername=disk.csi.azure.com"}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("kube-system").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// The provisioner lists VolumeAttachments, which only the attacher's
	// role grants (the sidecars share one ServiceAccount): without that
	// rule its informers never sync and it provisions nothing.
	const attacherRole = "azuredisk-external-attacher-role"
	hadVA := setRule(t, ctx, cs, attacherRole, "volumeattachments", nil)
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCfg := rest.AnonymousClientConfig(env.Config)
	podCfg.BearerToken = tr.Status.Token
	var comp *startneeds.Component
	for _, ct := range pod.Spec.Containers {
		if f := startneeds.New(cs).Find("linux", ct); f != nil && f.Name == "csi-provisioner" {
			comp = f
		}
	}
	if comp == nil || len(comp.Watches) == 0 {
		t.Fatal("the catalog's csi-provisioner lists nothing")
	}
	ps, err := startneeds.StartSession(startneeds.SessionConfig{Config: podCfg, Node: "node-r", Watches: comp.Watches, Sync: comp.Sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Stop)
	provisionerMu.Lock()
	provisioner = ps
	provisionerMu.Unlock()

	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A claim provisioned with the pod's rights: the PV and the event
	// come from its ServiceAccount.
	pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "rights", Annotations: map[string]string{
			"volume.kubernetes.io/storage-provisioner": azuredisk.DriverName, "volume.kubernetes.io/selected-node": "node-r"}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: to.Ptr("managed-csi-rights"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	del := corev1.PersistentVolumeReclaimDelete
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "managed-csi-rights"},
		Provisioner: azuredisk.DriverName, Parameters: map[string]string{"skuName": "StandardSSD_LRS"}, ReclaimPolicy: &del}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waits := "csi-provisioner in pod kube-system/" + pod.Name + " waits for its informers to sync: volumeattachments.storage.k8s.io: "
	poll.Until(t, time.Minute, func() string {
		for {
			select {
			case l := <-logs:
				if strings.Contains(l, waits) && strings.Contains(l, "forbidden") {
					return ""
				}
				continue
			default:
			}
			return "the provisioner does not say it waits for its refused list of VolumeAttachments; provisioner session: " + ps.Describe()
		}
	})
	if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err == nil {
		t.Fatal("a PV provisioned by a provisioner whose informers have not synced")
	}
	setRule(t, ctx, cs, attacherRole, "volumeattachments", hadVA)

	var pv *corev1.PersistentVolume
	poll.Until(t, time.Minute, func() string {
		var err error
		if pv, err = cs.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{}); err != nil {
			return "the PV of the claim: " + err.Error()
		}
		return ""
	})

	// The attacher may not write the attachment's status.
	had := setRule(t, ctx, cs, attacherRole, "volumeattachments/status", nil)
	if len(had) == 0 {
		t.Fatalf("the rendered %s grants nothing on volumeattachments/status", attacherRole)
	}
	name := vaName(pv.Spec.CSI.VolumeHandle, "node-r")
	if _, err := cs.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: azuredisk.DriverName, NodeName: "node-r",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: to.Ptr(pv.Name)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`volumeattachments.storage.k8s.io \"%s\" is forbidden: User \"system:serviceaccount:kube-system:%s\" cannot patch resource \"volumeattachments/status\"`, name, sa)
	seen := ""
	poll.Until(t, time.Minute, func() string {
		for {
			select {
			case l := <-logs:
				if strings.Contains(l, want) {
					return ""
				}
				seen = l
				continue
			default:
			}
			return "the attacher's refused status write is not logged; last: " + seen
		}
	})
	if va, err := cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{}); err != nil || va.Status.Attached {
		t.Fatalf("attachment marked attached by an attacher that may not write its status: %+v %v", va.Status, err)
	}

	// With the rule back, the attachment is marked attached.
	setRule(t, ctx, cs, attacherRole, "volumeattachments/status", had)
	poll.Until(t, time.Minute, func() string {
		va, err := cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if !va.Status.Attached {
			return "not attached yet"
		}
		return ""
	})
}
