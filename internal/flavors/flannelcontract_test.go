package flavors_test

import (
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/flavors"
)

// What a Windows flannel image laid out as the last upstream one reads
// (kubernetes-sigs/sig-windows-tools hostprocess/flannel before 729ae7cd,
// at 03f99247): flanneld/start.ps1 and kube-proxy/start.ps1, by path under
// $env:CONTAINER_SANDBOX_MOUNT_POINT and by environment variable. Each
// path is a mounted ConfigMap's key.
var flannelImageReads = map[string]struct {
	files []string
	env   []string
}{
	"kube-flannel-ds-windows": {
		// cp .../mounts/kube-flannel/net-conf.json; get-content
		// .../mounts/kube-flannel-windows/cni-conf-containerd.json;
		// mkdir $env:CNI_BIN_PATH, $env:CNI_CONFIG_PATH; $env:SERVICE_SUBNET;
		// flanneld --kube-subnet-mgr reads POD_NAME and POD_NAMESPACE and,
		// on Windows, the API server from KUBERNETES_SERVICE_HOST/PORT
		// (flannel-overlay.yml's override, flannel-io/flannel#1772).
		files: []string{"/mounts/kube-flannel/net-conf.json", "/mounts/kube-flannel-windows/cni-conf-containerd.json"},
		env:   []string{"CNI_BIN_PATH", "CNI_CONFIG_PATH", "SERVICE_SUBNET", "POD_NAME", "POD_NAMESPACE", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"},
	},
	"kube-proxy-windows": {
		// Get-Content .../mounts/var/lib/kube-proxy/kubeconfig.conf;
		// --hostname-override=$env:NODE_NAME; GetSourceVip -NetworkName
		// $env:KUBE_NETWORK with $env:CNI_BIN_PATH/host-local.exe.
		files: []string{"/mounts/var/lib/kube-proxy/kubeconfig.conf"},
		env:   []string{"NODE_NAME", "KUBE_NETWORK", "CNI_BIN_PATH"},
	},
}

// TestFlannelWindowsImageContract: a Windows flannel image and kube-proxy
// image built from the last upstream scripts find every file and variable
// they read in the flavors' pods, and start.ps1's edits of the CNI
// configuration (the delegate's AdditionalArgs 0 to 2 by index) land on
// the policies they mean.
func TestFlannelWindowsImageContract(t *testing.T) {
	for _, flavor := range []string{flavors.WindowsFlannel, flavors.WindowsHostGW} {
		_, addons, _ := objectsOf(t, flavor, opts("v1.36.3", "2022"))
		cms := map[string]*corev1.ConfigMap{
			// kubeadm's, which the kube-proxy pods mount.
			"kube-proxy": {Data: map[string]string{"config.conf": "", "kubeconfig.conf": ""}},
		}
		dss := map[string]*appsv1.DaemonSet{}
		for _, o := range addons {
			switch o := o.(type) {
			case *corev1.ConfigMap:
				cms[o.Name] = o
			case *appsv1.DaemonSet:
				dss[o.Name] = o
			}
		}
		for name, reads := range flannelImageReads {
			ds := dss[name]
			if ds == nil {
				t.Fatalf("%s: no DaemonSet %s", flavor, name)
			}
			pod := ds.Spec.Template.Spec
			c := pod.Containers[0]
			for _, file := range reads.files {
				found := false
				for _, m := range c.VolumeMounts {
					dir := strings.TrimSuffix(m.MountPath, "/")
					if path.Dir(file) != dir {
						continue
					}
					for _, v := range pod.Volumes {
						if v.Name == m.Name && v.ConfigMap != nil {
							cm := cms[v.ConfigMap.Name]
							_, found = cm.Data[path.Base(file)]
						}
					}
				}
				if !found {
					t.Errorf("%s: %s reads $env:CONTAINER_SANDBOX_MOUNT_POINT%s, which no mounted ConfigMap key provides", flavor, name, file)
				}
			}
			for _, env := range reads.env {
				found := false
				for _, e := range c.Env {
					found = found || e.Name == env
				}
				if !found {
					t.Errorf("%s: %s reads $env:%s, which its pod does not set", flavor, name, env)
				}
			}
		}
		var conf struct {
			Delegate struct {
				AdditionalArgs []struct {
					Value struct {
						Type     string
						Settings map[string]any
					}
				}
			}
		}
		if err := jsonUnmarshal(cms["kube-flannel-windows-cfg"].Data[flavors.FlannelWindowsCNIKey], &conf); err != nil {
			t.Fatal(err)
		}
		args := conf.Delegate.AdditionalArgs
		// start.ps1 sets [0].Settings.Exceptions, [1].DestinationPrefix
		// and, for the overlay, [2].ProviderAddress.
		want := []string{"OutBoundNAT", "SDNROUTE", "ProviderAddress"}
		if flavor == flavors.WindowsHostGW {
			want = want[:2] // sdnbridge has no provider address: the user's script must not set one
		}
		if len(args) != len(want) {
			t.Fatalf("%s: AdditionalArgs %+v, want %v", flavor, args, want)
		}
		for i, typ := range want {
			if args[i].Value.Type != typ {
				t.Errorf("%s: AdditionalArgs[%d] is %s, start.ps1 edits it as %s", flavor, i, args[i].Value.Type, typ)
			}
		}
	}
}
