package metricsserver_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/metricsserver"
)

func TestParseArgs(t *testing.T) {
	// The upstream manifest's args, plus the flag its users add.
	a, err := metricsserver.ParseArgs([]string{"--cert-dir=/tmp", "--secure-port=10250", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname", "--kubelet-use-node-status-port", "--metric-resolution=15s", "--kubelet-insecure-tls"})
	if err != nil {
		t.Fatal(err)
	}
	if a.SecurePort != 10250 || a.MetricResolution != 15*time.Second || !a.UseNodeStatusPort || !a.KubeletInsecureTLS ||
		len(a.AddressTypes) != 3 || a.AddressTypes[0] != corev1.NodeInternalIP {
		t.Errorf("parsed %+v", a)
	}
	// Upstream's defaults: 60s, port 443, hostname first.
	d, err := metricsserver.ParseArgs([]string{"/metrics-server"})
	if err != nil {
		t.Fatal(err)
	}
	if d.MetricResolution != time.Minute || d.SecurePort != 443 || d.KubeletPort != 10250 || d.AddressTypes[0] != corev1.NodeHostName {
		t.Errorf("defaults %+v", d)
	}
	if _, err := metricsserver.ParseArgs([]string{"--metric-resolution=5s"}); err == nil || !strings.Contains(err.Error(), "at least 10s") {
		t.Errorf("a 5s resolution: %v", err)
	}
}

func TestRequestHeaderFrom(t *testing.T) {
	if _, err := metricsserver.RequestHeaderFrom(map[string]string{"client-ca-file": "x"}); err == nil || !strings.Contains(err.Error(), "--requestheader-client-ca-file") {
		t.Errorf("no request-header CA: %v", err)
	}
	if _, err := metricsserver.RequestHeaderFrom(map[string]string{"requestheader-client-ca-file": "not PEM"}); err == nil {
		t.Error("a CA that is not PEM is accepted")
	}
}
