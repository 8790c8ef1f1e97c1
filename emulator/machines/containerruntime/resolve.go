package containerruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// ServiceAccountDir is where the kubelet mounts a pod's service account
// token, CA and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Environment is the container's environment as the kubelet builds it
// (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables, v1.36.3): the
// Services' variables first, then envFrom, then env, each resolving its
// source (Secrets, ConfigMaps, the downward API's fields and resources);
// a later name wins.
func Environment(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ct corev1.Container) ([]corev1.EnvVar, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	svcVars, err := serviceVariables(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	for _, kv := range svcVars {
		set(kv[0], kv[1])
	}
	for _, from := range ct.EnvFrom {
		data := map[string]string{}
		switch {
		case from.ConfigMapRef != nil:
			cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			if err == nil {
				data = cm.Data
			}
		case from.SecretRef != nil:
			s, err := c.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			if err == nil {
				for k, v := range s.Data {
					data[k] = string(v)
				}
			}
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range ct.Env {
		v, err := envValue(ctx, c, pod, ct, e)
		if err != nil {
			return nil, err
		}
		set(e.Name, expandVars(v, vals))
	}
	out := make([]corev1.EnvVar, 0, len(order))
	for _, k := range order {
		out = append(out, corev1.EnvVar{Name: k, Value: vals[k]})
	}
	return out, nil
}

func envValue(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ct corev1.Container, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch {
	case e.ValueFrom.FieldRef != nil:
		return fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
	case e.ValueFrom.ResourceFieldRef != nil:
		return resourceValue(ctx, c, pod, ct, e.ValueFrom.ResourceFieldRef)
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return cm.Data[ref.Key], nil
	case e.ValueFrom.SecretKeyRef != nil:
		ref := e.ValueFrom.SecretKeyRef
		s, err := c.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return string(s.Data[ref.Key]), nil
	}
	return "", nil
}

// fieldValue is a downward API field as the kubelet resolves it
// (pkg/kubelet/kubelet_pods.go podFieldSelectorRuntimeValue, and
// pkg/fieldpath ExtractFieldPathAsString for the metadata fields,
// v1.36.3). The API server validates the path.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		var ips []string
		for _, ip := range pod.Status.HostIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		var ips []string
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	if m := subscript.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", path)
}

var subscript = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.*)'\]$`)

// formatMap is pkg/fieldpath FormatMap: key="value" lines, sorted, the
// value quoted as Go's %q does.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%v=%q\n", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// resourceValue is a resourceFieldRef as the kubelet resolves it: the
// named container's request or limit, a limit the container does not set
// being the node's allocatable, in units of the divisor, rounded up
// (kubelet_pods.go containerResourceRuntimeValue and
// defaultPodLimitsForDownwardAPI; pkg/api/v1/resource/helpers.go
// ExtractContainerResourceValue, v1.36.3).
func resourceValue(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ct corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" {
		for _, o := range pod.Spec.Containers {
			if o.Name == ref.ContainerName {
				ct = o
			}
		}
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := ct.Resources.Requests
	if kind == "limits" {
		list = ct.Resources.Limits
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok && kind == "limits" && pod.Spec.NodeName != "" {
		node, err := c.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		q = node.Status.Allocatable[corev1.ResourceName(name)]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == "cpu" {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// serviceVariables are the Service variables the kubelet sets: those of
// the default namespace's kubernetes Service for every pod, and of every
// Service of the pod's namespace unless enableServiceLinks is false;
// Services without a ClusterIP have none (kubelet_pods.go
// getServiceEnvVarMap; pkg/kubelet/envvars FromServices, v1.36.3).
func serviceVariables(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) ([][2]string, error) {
	var svcs []corev1.Service
	master, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err == nil {
		svcs = append(svcs, *master)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		list, err := c.CoreV1().Services(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
		for _, s := range list.Items {
			if s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes" {
				continue
			}
			svcs = append(svcs, s)
		}
	}
	var out [][2]string
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		first := strconv.Itoa(int(s.Spec.Ports[0].Port))
		out = append(out, [2]string{prefix + "_SERVICE_HOST", ip}, [2]string{prefix + "_SERVICE_PORT", first})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, [2]string{prefix + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
			}
		}
		for i, p := range s.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			hostPort := net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
			url := strings.ToLower(proto) + "://" + hostPort
			if i == 0 {
				out = append(out, [2]string{prefix + "_PORT", url})
			}
			pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
			out = append(out, [2]string{pp, url}, [2]string{pp + "_PROTO", strings.ToLower(proto)}, [2]string{pp + "_PORT", strconv.Itoa(int(p.Port))}, [2]string{pp + "_ADDR", ip})
		}
	}
	return out, nil
}

// Mounts are the container's volume mounts with what is behind each, as
// the kubelet sets them up; the service account's token is mounted
// unless the pod opts out. Directories a hostPath volume of type
// DirectoryOrCreate names are created on the node's disk.
func Mounts(ctx context.Context, c kubernetes.Interface, disk vmdisk.Disk, pod *corev1.Pod, ct corev1.Container) ([]Mount, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	var out []Mount
	token := true
	for _, vm := range ct.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			continue
		}
		m := Mount{At: vm.MountPath, ReadOnly: vm.ReadOnly}
		switch {
		case v.HostPath != nil:
			m.HostDir = v.HostPath.Path
			if t := v.HostPath.Type; t != nil && *t == corev1.HostPathDirectoryOrCreate {
				if hp, err := disk.HostPath(v.HostPath.Path); err == nil {
					_ = os.MkdirAll(hp, 0o755)
				}
			}
		case v.ConfigMap != nil:
			cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			m.Files = map[string][]byte{}
			if err == nil {
				for k, d := range cm.Data {
					m.Files[k] = []byte(d)
				}
				if len(v.ConfigMap.Items) > 0 {
					items := map[string][]byte{}
					for _, it := range v.ConfigMap.Items {
						if d, ok := cm.Data[it.Key]; ok {
							items[it.Path] = []byte(d)
						}
					}
					m.Files = items
				}
			}
		case v.Secret != nil:
			s, err := c.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			m.Files = map[string][]byte{}
			if err == nil {
				for k, d := range s.Data {
					m.Files[k] = d
				}
			}
		case v.Projected != nil:
			// The API server's service-account admission mounts
			// the token, the cluster CA and the namespace this way.
			m.Files = map[string][]byte{}
			for _, src := range v.Projected.Sources {
				switch {
				case src.ServiceAccountToken != nil:
					m.Files[src.ServiceAccountToken.Path] = []byte("(a projected token)")
				case src.ConfigMap != nil:
					cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
					if err != nil && !apierrors.IsNotFound(err) {
						return nil, err
					}
					if err == nil {
						for _, it := range src.ConfigMap.Items {
							m.Files[it.Path] = []byte(cm.Data[it.Key])
						}
						if len(src.ConfigMap.Items) == 0 {
							for k, d := range cm.Data {
								m.Files[k] = []byte(d)
							}
						}
					}
				case src.DownwardAPI != nil:
					for _, it := range src.DownwardAPI.Items {
						if it.FieldRef != nil && it.FieldRef.FieldPath == "metadata.namespace" {
							m.Files[it.Path] = []byte(pod.Namespace)
						}
					}
				}
			}
		case v.PersistentVolumeClaim != nil && disk.Root != "":
			// A CSI volume the kubelet published is the folder its driver
			// linked into the pod's; other claims are taken as mounted.
			m.Files = map[string][]byte{}
			pvc, err := c.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, err
			}
			if err == nil && pvc.Spec.VolumeName != "" {
				target := CSITargetPath(disk.Windows, pod, pvc.Spec.VolumeName)
				if hp, err := disk.HostPath(target); err == nil {
					if _, err := os.Stat(hp); err == nil {
						m.HostDir, m.Files = target, nil
					}
				}
			}
			m.ReadOnly = m.ReadOnly || v.PersistentVolumeClaim.ReadOnly
		case v.EmptyDir != nil && disk.Root == "":
			m.Files = map[string][]byte{}
		case v.EmptyDir != nil:
			m.HostDir = EmptyDirPath(disk.Windows, pod, v.Name)
			if hp, err := disk.HostPath(m.HostDir); err == nil {
				_ = os.MkdirAll(hp, 0o755)
			}
		default:
			m.Files = map[string][]byte{}
		}
		if vm.MountPath == ServiceAccountDir {
			token = false
		}
		out = append(out, m)
	}
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		token = false
	}
	if token {
		out = append(out, Mount{At: ServiceAccountDir, ReadOnly: true, Files: map[string][]byte{
			"token": []byte("(a projected token)"), "ca.crt": []byte("(the cluster CA)"), "namespace": []byte(pod.Namespace),
		}})
	}
	return out, nil
}

// KubeletRootDir is the kubelet's --root-dir as the node's OS writes it:
// the kubelet's default "/var/lib/kubelet" (cmd/kubelet/app/options
// options.go defaultRootDir, kubernetes v1.36.3), which a Windows kubelet
// resolves on the system drive.
func KubeletRootDir(windows bool) string {
	if windows {
		return `C:\var\lib\kubelet`
	}
	return "/var/lib/kubelet"
}

// PodDir is where the kubelet keeps a pod's volumes on the node
// (pkg/kubelet/kubelet_getters.go getPodDir, v1.36.3).
func PodDir(windows bool, uid string) string {
	if windows {
		return KubeletRootDir(true) + `\pods\` + uid
	}
	return KubeletRootDir(false) + "/pods/" + uid
}

// EmptyDirPath is the node's directory behind a pod's emptyDir volume:
// pods/<uid>/volumes/kubernetes.io~empty-dir/<name> under the kubelet's
// root (pkg/volume/emptydir/empty_dir.go getPath and kubelet_getters.go
// getPodVolumeDir, v1.36.3). Every container of the pod mounts the same
// directory, and it goes with the pod.
func EmptyDirPath(windows bool, pod *corev1.Pod, name string) string {
	if windows {
		return PodDir(true, string(pod.UID)) + `\volumes\kubernetes.io~empty-dir\` + name
	}
	return PodDir(false, string(pod.UID)) + "/volumes/kubernetes.io~empty-dir/" + name
}

// Arg is the value of a --name=value or --name value argument of the
// container's command line, as its program's flag package reads it; a
// bare --name followed by another flag (or nothing) is present and empty.
func Arg(c corev1.Container, name string) (string, bool) {
	args := append(append([]string(nil), c.Command...), c.Args...)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}

// CSITargetPath is where the kubelet has a CSI driver publish a volume
// for a pod: pods/<uid>/volumes/kubernetes.io~csi/<PV name>/mount under
// the kubelet's root (pkg/volume/csi/csi_mounter.go getTargetPath and
// csi_util.go GetCSIMounterPath, v1.36.3).
func CSITargetPath(windows bool, pod *corev1.Pod, pv string) string {
	if windows {
		return PodDir(true, string(pod.UID)) + `\volumes\kubernetes.io~csi\` + pv + `\mount`
	}
	return PodDir(false, string(pod.UID)) + "/volumes/kubernetes.io~csi/" + pv + "/mount"
}

// ContainerID is the runtime's ID for a container of a pod, stable across
// the kubelet's syncs.
func ContainerID(pod *corev1.Pod, name string) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + name))
	return hex.EncodeToString(sum[:])
}
