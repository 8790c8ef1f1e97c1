package flavors_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/flavors"
)

func azureDiskParts(objs []client.Object) (*clusterv1.Cluster, *addonsv1.ClusterResourceSet, *corev1.ConfigMap) {
	return addonParts(objs, "azuredisk-csi")
}

// TestAzureDiskCSIIsOptIn: no flavor installs the driver by default; with
// the option the Cluster carries CAPZ's label azuredisk-csi: "true", which
// selects the add-on's ClusterResourceSet.
func TestAzureDiskCSIIsOptIn(t *testing.T) {
	for _, flavor := range flavors.Names() {
		o := opts("v1.36.3", "2022")
		objs, err := flavors.Generate(flavor, o)
		if err != nil {
			t.Fatal(err)
		}
		if cluster, set, cm := azureDiskParts(objs); cluster.Labels[flavors.AzureDiskCSILabel] != "" || set != nil || cm != nil {
			t.Fatalf("%s: by default, label %q, ClusterResourceSet %v, ConfigMap %v", flavor, cluster.Labels[flavors.AzureDiskCSILabel], set != nil, cm != nil)
		}
		o.AzureDiskCSI = true
		if objs, err = flavors.Generate(flavor, o); err != nil {
			t.Fatal(err)
		}
		cluster, set, cm := azureDiskParts(objs)
		if set == nil || cm == nil {
			t.Fatalf("%s: with the add-on, ClusterResourceSet %v, ConfigMap %v", flavor, set != nil, cm != nil)
		}
		if cluster.Labels["azuredisk-csi"] != "true" || set.Name != "golden-azuredisk-csi" {
			t.Errorf("%s: Cluster label %q, set %s; want azuredisk-csi: \"true\" and golden-azuredisk-csi", flavor, cluster.Labels["azuredisk-csi"], set.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
		if err != nil || !sel.Matches(labels.Set(cluster.Labels)) || len(set.Spec.Resources) != 1 || set.Spec.Resources[0].Name != cm.Name {
			t.Fatalf("%s: the ClusterResourceSet %v does not select Cluster labels %v and its ConfigMap %s (%v)", flavor, set.Spec, cluster.Labels, cm.Name, err)
		}
		delete(cluster.Labels, flavors.AzureDiskCSILabel)
		if sel.Matches(labels.Set(cluster.Labels)) {
			t.Errorf("%s: the add-on selects a Cluster without its label", flavor)
		}
	}
}

// azureDiskDelivered is what the add-on's ClusterResourceSet applies for
// the Windows flavor, by kind and name.
func azureDiskDelivered(t *testing.T, taint bool) map[string]*unstructured.Unstructured {
	t.Helper()
	o := opts("v1.36.3", "2022")
	o.AzureDiskCSI, o.WindowsTaint = true, taint
	objs, err := flavors.Generate(flavors.Windows, o)
	if err != nil {
		t.Fatal(err)
	}
	_, set, cm := azureDiskParts(objs)
	out := map[string]*unstructured.Unstructured{}
	for _, u := range addonObjects(t, []client.Object{set, cm}) {
		out[u.GetKind()+"/"+u.GetName()] = u
	}
	return out
}

func containerIn(cs []corev1.Container, name string) corev1.Container {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}

func mountAt(c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

func volumeNamed(vs []corev1.Volume, name string) corev1.Volume {
	for _, v := range vs {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

func ruleGrants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestAzureDiskCSIObjects: the add-on delivers the chart 1.34.5's objects
// with CAPZ's values, the key values as the chart renders them, and a real
// API server accepts every one.
func TestAzureDiskCSIObjects(t *testing.T) {
	got := azureDiskDelivered(t, false)
	get := func(key string, into any) {
		t.Helper()
		u, ok := got[key]
		if !ok {
			t.Fatalf("the add-on delivers no %s (it has %d objects)", key, len(got))
		}
		mustConvert(t, u, into)
	}

	driver := &storagev1.CSIDriver{}
	get("CSIDriver/disk.csi.azure.com", driver)
	if s := driver.Spec; s.AttachRequired == nil || !*s.AttachRequired || s.PodInfoOnMount == nil || *s.PodInfoOnMount ||
		s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		t.Errorf("CSIDriver spec %+v, want attachRequired, no podInfoOnMount, fsGroupPolicy File", s)
	}

	sc := &storagev1.StorageClass{}
	get("StorageClass/managed-csi", sc)
	if sc.Provisioner != "disk.csi.azure.com" || sc.Parameters["skuName"] != "StandardSSD_LRS" || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || !*sc.AllowVolumeExpansion {
		t.Errorf("StorageClass managed-csi: %+v", sc)
	}

	for _, sa := range []string{"csi-azuredisk-controller-sa", "csi-azuredisk-node-sa"} {
		get("ServiceAccount/"+sa, &corev1.ServiceAccount{})
	}
	// Each role bound to its ServiceAccount, with the grants the driver's
	// components are known to use.
	bound := map[string]string{}
	for key, u := range got {
		if strings.HasPrefix(key, "ClusterRoleBinding/") {
			b := &rbacv1.ClusterRoleBinding{}
			mustConvert(t, u, b)
			bound[b.RoleRef.Name] = b.Subjects[0].Namespace + "/" + b.Subjects[0].Name
		}
	}
	for _, tc := range []struct {
		role, sa, group, resource, verb string
	}{
		{"azuredisk-external-provisioner-role", "csi-azuredisk-controller-sa", "", "persistentvolumes", "create"},
		{"azuredisk-external-attacher-role", "csi-azuredisk-controller-sa", "storage.k8s.io", "volumeattachments", "patch"},
		{"azuredisk-external-attacher-role", "csi-azuredisk-controller-sa", "storage.k8s.io", "volumeattachments/status", "patch"},
		{"azuredisk-external-snapshotter-role", "csi-azuredisk-controller-sa", "snapshot.storage.k8s.io", "volumesnapshotcontents", "create"},
		{"azuredisk-external-resizer-role", "csi-azuredisk-controller-sa", "", "persistentvolumeclaims/status", "patch"},
		{"csi-azuredisk-controller-secret-role", "csi-azuredisk-controller-sa", "", "secrets", "get"},
		{"csi-azuredisk-node-role", "csi-azuredisk-node-sa", "storage.k8s.io", "csinodes", "get"},
		{"csi-azuredisk-node-role", "csi-azuredisk-node-sa", "", "nodes", "patch"},
	} {
		role := &rbacv1.ClusterRole{}
		get("ClusterRole/"+tc.role, role)
		if !ruleGrants(role.Rules, tc.group, tc.resource, tc.verb) || bound[tc.role] != "kube-system/"+tc.sa {
			t.Errorf("ClusterRole %s (bound to %q) does not grant %s %s.%s to kube-system/%s", tc.role, bound[tc.role], tc.verb, tc.resource, tc.group, tc.sa)
		}
	}

	d := &appsv1.Deployment{}
	get("Deployment/csi-azuredisk-controller", d)
	ps := d.Spec.Template.Spec
	var names []string
	for _, c := range ps.Containers {
		names = append(names, c.Name)
	}
	if *d.Spec.Replicas != 1 || !ps.HostNetwork || ps.NodeSelector[corev1.LabelOSStable] != "linux" || ps.PriorityClassName != "system-cluster-critical" ||
		ps.ServiceAccountName != "csi-azuredisk-controller-sa" || d.Namespace != "kube-system" ||
		!slices.Equal(names, []string{"csi-provisioner", "csi-attacher", "csi-snapshotter", "csi-resizer", "liveness-probe", "azuredisk"}) {
		t.Errorf("controller: replicas %d, hostNetwork %v, nodeSelector %v, priority %s, SA %s, containers %v", *d.Spec.Replicas, ps.HostNetwork, ps.NodeSelector,
			ps.PriorityClassName, ps.ServiceAccountName, names)
	}
	if term := ps.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(term) != 1 ||
		term[0].MatchExpressions[0].Key != "node-role.kubernetes.io/control-plane" || term[0].MatchExpressions[0].Operator != corev1.NodeSelectorOpExists {
		t.Errorf("controller affinity %+v, want the control plane (runOnControlPlane)", term)
	}
	tolerated := map[string]bool{}
	for _, tol := range ps.Tolerations {
		tolerated[tol.Key] = tol.Operator == corev1.TolerationOpExists && tol.Effect == corev1.TaintEffectNoSchedule
	}
	for _, k := range []string{"node-role.kubernetes.io/master", "node-role.kubernetes.io/controlplane", "node-role.kubernetes.io/control-plane", "CriticalAddonsOnly"} {
		if !tolerated[k] {
			t.Errorf("the controller does not tolerate %s: %+v", k, ps.Tolerations)
		}
	}
	az := containerIn(ps.Containers, "azuredisk")
	for _, a := range []string{"--endpoint=$(CSI_ENDPOINT)", "--drivername=disk.csi.azure.com", "--cloud-config-secret-name=azure-cloud-provider",
		"--cloud-config-secret-namespace=kube-system", "--allow-empty-cloud-config=false", "--check-disk-lun-collision=true", "--metrics-address=0.0.0.0:29604"} {
		if !slices.Contains(az.Args, a) {
			t.Errorf("the controller's azuredisk lacks %s: %v", a, az.Args)
		}
	}
	if az.Image != "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5" || slices.ContainsFunc(az.Args, func(a string) bool { return strings.HasPrefix(a, "--nodeid") }) {
		t.Errorf("the controller runs %s %v", az.Image, az.Args)
	}
	if mountAt(az, "/csi") != "socket-dir" || mountAt(az, "/etc/kubernetes/") != "azure-cred" ||
		volumeNamed(ps.Volumes, "socket-dir").EmptyDir == nil {
		t.Errorf("the controller's azuredisk mounts %+v, volumes %+v", az.VolumeMounts, ps.Volumes)
	}
	if hp := volumeNamed(ps.Volumes, "azure-cred").HostPath; hp == nil || hp.Path != "/etc/kubernetes/" || *hp.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("azure-cred is %+v, want hostPath /etc/kubernetes/ DirectoryOrCreate", hp)
	}
	for _, c := range ps.Containers {
		if mountAt(c, "/csi") != "socket-dir" {
			t.Errorf("controller container %s does not share the socket directory", c.Name)
		}
	}
	if p := containerIn(ps.Containers, "csi-provisioner"); !slices.Contains(p.Args, "--feature-gates=Topology=true,VolumeAttributesClass=true") ||
		!slices.Contains(p.Args, "--strict-topology=true") || p.Image != "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner:v6.3.0" {
		t.Errorf("csi-provisioner %s %v", p.Image, p.Args)
	}
	if p := containerIn(ps.Containers, "liveness-probe"); !slices.Contains(p.Args, "--http-endpoint=localhost:29602") {
		t.Errorf("the controller's liveness-probe %v", p.Args)
	}

	linux := &appsv1.DaemonSet{}
	get("DaemonSet/csi-azuredisk-node", linux)
	lp := linux.Spec.Template.Spec
	node := containerIn(lp.Containers, "azuredisk")
	if lp.NodeSelector[corev1.LabelOSStable] != "linux" || !lp.HostNetwork || lp.ServiceAccountName != "csi-azuredisk-node-sa" || len(lp.Containers) != 3 ||
		!slices.Contains(node.Args, "--nodeid=$(KUBE_NODE_NAME)") || node.SecurityContext == nil || !*node.SecurityContext.Privileged {
		t.Errorf("Linux node plugin: %+v", lp)
	}
	for path, volume := range map[string]string{"/csi": "/var/lib/kubelet/plugins/disk.csi.azure.com", "/var/lib/kubelet/": "/var/lib/kubelet/", "/etc/kubernetes/": "/etc/kubernetes/",
		"/dev": "/dev", "/sys/bus/scsi/devices": "/sys/bus/scsi/devices", "/sys/class/": "/sys/class/"} {
		if hp := volumeNamed(lp.Volumes, mountAt(node, path)).HostPath; hp == nil || hp.Path != volume {
			t.Errorf("the Linux node plugin mounts %s from %+v, want hostPath %s", path, hp, volume)
		}
	}
	if reg := containerIn(lp.Containers, "node-driver-registrar"); volumeNamed(lp.Volumes, mountAt(reg, "/registration")).HostPath.Path != "/var/lib/kubelet/plugins_registry/" {
		t.Errorf("the Linux registrar's registration directory: %+v", reg.VolumeMounts)
	}

	win := &appsv1.DaemonSet{}
	get("DaemonSet/csi-azuredisk-node-win", win)
	wp := win.Spec.Template.Spec
	wo := wp.SecurityContext.WindowsOptions
	if wp.NodeSelector[corev1.LabelOSStable] != "windows" || !wp.HostNetwork || wo == nil || !*wo.HostProcess || *wo.RunAsUserName != `NT AUTHORITY\SYSTEM` ||
		len(wp.Volumes) != 0 || len(wp.InitContainers) != 1 || wp.ServiceAccountName != "csi-azuredisk-node-sa" {
		t.Errorf("Windows node plugin: not the HostProcess form: %+v", wp)
	}
	if len(wp.Tolerations) != 1 || wp.Tolerations[0].Key != "node.kubernetes.io/os" {
		t.Errorf("Windows node plugin tolerations %+v", wp.Tolerations)
	}
	reg := containerIn(wp.Containers, "node-driver-registrar")
	plugin := containerIn(wp.Containers, "azuredisk")
	if !slices.Equal(reg.Command, []string{"csi-node-driver-registrar.exe"}) || !slices.Contains(reg.Args, "--plugin-registration-path=$(PLUGIN_REG_DIR)") ||
		!slices.Equal(plugin.Command, []string{"azurediskplugin.exe"}) || !slices.Contains(plugin.Args, "--enable-windows-host-process=true") ||
		!slices.Contains(plugin.Args, "--allow-empty-cloud-config=true") || plugin.Image != "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5-windows-hp" ||
		wp.InitContainers[0].Image != plugin.Image || wp.InitContainers[0].Command[0] != "powershell.exe" {
		t.Errorf("Windows node plugin containers: init %+v, registrar %+v, driver %+v", wp.InitContainers[0], reg, plugin)
	}

	// The API server accepts every object as it is (as an update where
	// another test of this API server applied the add-on).
	ctx := context.Background()
	for key, u := range got {
		err := env.Client.Create(ctx, u.DeepCopy(), client.DryRunAll)
		if apierrors.IsAlreadyExists(err) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(u.GroupVersionKind())
			if err = env.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err == nil {
				upd := u.DeepCopy()
				upd.SetResourceVersion(cur.GetResourceVersion())
				err = env.Client.Update(ctx, upd, client.DryRunAll)
			}
		}
		if err != nil {
			t.Errorf("the API server refuses %s: %v", key, err)
		}
	}

	// The flavors' own Windows taint is tolerated, as by every Windows
	// add-on.
	win = &appsv1.DaemonSet{}
	mustConvert(t, azureDiskDelivered(t, true)["DaemonSet/csi-azuredisk-node-win"], win)
	if !slices.ContainsFunc(win.Spec.Template.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == "os" && tol.Value == "windows" }) {
		t.Errorf("with --windows-taint the Windows node plugin tolerates %+v", win.Spec.Template.Spec.Tolerations)
	}
}

// TestAzureDiskCSITemplateVariable: in a clusterctl template the add-on is
// the optional variable AZUREDISK_CSI, off unless set to true, as
// clusterctl's own template processor reads it; the label stays a string.
func TestAzureDiskCSITemplateVariable(t *testing.T) {
	checkAddonVariable(t, "AZUREDISK_CSI", "false", map[string]bool{"": false, "false": false, "true": true}, "azuredisk-csi")
}
