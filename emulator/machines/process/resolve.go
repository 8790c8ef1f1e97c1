package process

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// ServiceAccountDir is where the kubelet mounts a pod's service account
// token, CA and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Environment is the container's environment as the kubelet builds it
// (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables): the kubernetes
// Service's variables first, then envFrom, then env, each resolving its
// source; a later name wins.
func Environment(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ct corev1.Container) ([]corev1.EnvVar, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	// The master service's variables are set for every pod, whatever
	// enableServiceLinks says.
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err == nil && len(svc.Spec.Ports) > 0 {
		port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
		set("KUBERNETES_SERVICE_HOST", svc.Spec.ClusterIP)
		set("KUBERNETES_SERVICE_PORT", port)
		set("KUBERNETES_SERVICE_PORT_HTTPS", port)
		set("KUBERNETES_PORT", "tcp://"+net.JoinHostPort(svc.Spec.ClusterIP, port))
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
		v, err := envValue(ctx, c, pod, e)
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

func envValue(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch {
	case e.ValueFrom.FieldRef != nil:
		switch e.ValueFrom.FieldRef.FieldPath {
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "status.podIP":
			return pod.Status.PodIP, nil
		case "status.hostIP":
			return pod.Status.HostIP, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		}
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

// ContainerID is the runtime's ID for a container of a pod, stable across
// the kubelet's syncs.
func ContainerID(pod *corev1.Pod, name string) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + name))
	return hex.EncodeToString(sum[:])
}
