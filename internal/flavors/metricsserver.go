package flavors

import (
	_ "embed"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// metrics-server, the source of the Metrics API (kubectl top, the
// HorizontalPodAutoscaler's resource metrics), as an opt-in add-on: a
// ClusterResourceSet selecting Clusters labelled metrics-server=enabled,
// the label CAPZ's metrics-server add-on selects by
// (templates/addons/metrics-server/metrics-server-resource-set.yaml,
// 69ec3a40).
const (
	MetricsServerLabel   = "metrics-server"
	metricsServerEnabled = "enabled"
	// metricsServerDisabled is a clusterctl template's default: any value
	// but enabled leaves the add-on out.
	metricsServerDisabled = "disabled"
	// MetricsServerImage is the image the pinned release manifest runs.
	MetricsServerImage = "registry.k8s.io/metrics-server/metrics-server:v0.8.0"
	// metricsServerInsecureTLS: kubeadm's kubelets (serverTLSBootstrap
	// false, as in every flavor) serve a self-signed certificate, which
	// metrics-server cannot verify against the cluster's CA, so it could
	// scrape no node without this flag. CAPZ's add-on adds it for the same
	// reason (templates/addons/metrics-server/patches/
	// temp-use-insecure-https.yaml, 69ec3a40).
	metricsServerInsecureTLS = "--kubelet-insecure-tls"
)

//go:embed metrics-server-v0.8.0.yaml
var metricsServerManifest string

func (b *builder) metricsServer() []client.Object {
	if !b.o.MetricsServer {
		return nil
	}
	var objs []runtime.Object
	for _, u := range MetricsServerObjects() {
		objs = append(objs, u)
	}
	return b.crs(b.o.ClusterName+"-metrics-server", map[string]string{MetricsServerLabel: metricsServerEnabled}, b.configMap("metrics-server", objs...))
}

// MetricsServerObjects are the release manifest's objects, in its order,
// with the one flag the flavors add to the Deployment.
func MetricsServerObjects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(metricsServerManifest, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			panic(fmt.Sprintf("the embedded metrics-server manifest: %v", err))
		}
		if u.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			c["args"] = append(c["args"].([]any), metricsServerInsecureTLS)
			if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				panic(err)
			}
		}
		out = append(out, u)
	}
	return out
}
