package metricsserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultAddressTypes is --kubelet-preferred-address-types' default
// (pkg/utils/address_resolver.go DefaultAddressTypePriority, v0.8.0).
var DefaultAddressTypes = []corev1.NodeAddressType{corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeInternalIP, corev1.NodeExternalDNS, corev1.NodeExternalIP}

// resourceMetricsPathAnnotation lets a node name another path than
// /metrics/resource (pkg/scraper/client/resource/client.go, v0.8.0).
const resourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"

// nodeURL is where metrics-server reads a node's kubelet: the first of
// the node's addresses in the preferred order, on the kubelet port (the
// node status's with --kubelet-use-node-status-port, as the upstream
// manifest sets).
func (s *Server) nodeURL(node *corev1.Node) (string, error) {
	addr := ""
	for _, t := range s.opts.AddressTypes {
		for _, a := range node.Status.Addresses {
			if a.Type == t && addr == "" {
				addr = a.Address
			}
		}
	}
	if addr == "" {
		// The upstream resolver's error.
		return "", fmt.Errorf("no address matched types %v", s.opts.AddressTypes)
	}
	port := s.opts.KubeletPort
	if p := node.Status.DaemonEndpoints.KubeletEndpoint.Port; s.opts.UseNodeStatusPort && p != 0 {
		port = int(p)
	}
	path := "/metrics/resource"
	if p := node.Annotations[resourceMetricsPathAnnotation]; p != "" {
		path = p
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(addr, strconv.Itoa(port)), Path: path}
	return u.String(), nil
}

// scrape reads every node's kubelet at once; a node that fails is logged
// and left out of the batch, as upstream's scraper does.
func (s *Server) scrape(ctx context.Context, nodes []*corev1.Node) batch {
	b := batch{nodes: map[string]point{}, pods: map[types.NamespacedName]map[string]point{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one, err := s.scrapeNode(ctx, n)
			if err != nil {
				s.opts.Log.Info("Failed to scrape node", "node", n.Name, "err", err.Error())
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range one.nodes {
				b.nodes[k] = v
			}
			for k, v := range one.pods {
				if _, dup := b.pods[k]; !dup {
					b.pods[k] = v
				}
			}
		}()
	}
	wg.Wait()
	return b
}

func (s *Server) scrapeNode(ctx context.Context, node *corev1.Node) (batch, error) {
	u, err := s.nodeURL(node)
	if err != nil {
		return batch{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return batch{}, err
	}
	requested := time.Now()
	resp, err := s.kubelet.Do(req)
	if err != nil {
		return batch{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The upstream client's error.
		return batch{}, fmt.Errorf("request failed, status: %q", resp.Status)
	}
	return decode(resp.Body, requested, node.Name)
}

// decode reads the kubelet's resource metrics as upstream's decodeBatch
// does (pkg/scraper/client/resource/decode.go, v0.8.0): a sample without
// a timestamp is taken at the request's time; a node or container whose
// CPU counter or working set is zero (or missing) is left out.
func decode(r io.Reader, requested time.Time, nodeName string) (batch, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return batch{}, fmt.Errorf("failed parsing metrics: %w", err)
	}
	at := func(m *dto.Metric) time.Time {
		if m.TimestampMs != nil {
			return time.UnixMilli(m.GetTimestampMs())
		}
		return requested
	}
	value := func(m *dto.Metric) float64 {
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
		return 0
	}
	var node point
	if f := families["node_cpu_usage_seconds_total"]; f != nil && len(f.Metric) > 0 {
		node.cpu, node.at = uint64(value(f.Metric[0])*1e9), at(f.Metric[0])
	}
	if f := families["node_memory_working_set_bytes"]; f != nil && len(f.Metric) > 0 {
		node.mem, node.at = uint64(value(f.Metric[0])), at(f.Metric[0])
	}
	b := batch{nodes: map[string]point{}, pods: map[types.NamespacedName]map[string]point{}}
	if !node.at.IsZero() && node.cpu != 0 && node.mem != 0 {
		b.nodes[nodeName] = node
	}
	type ctrRef struct {
		pod  types.NamespacedName
		name string
	}
	ctrs := map[ctrRef]*point{}
	each := func(family string, set func(p *point, m *dto.Metric)) {
		for _, m := range families[family].GetMetric() {
			var ref ctrRef
			for _, l := range m.Label {
				switch l.GetName() {
				case "container":
					ref.name = l.GetValue()
				case "pod":
					ref.pod.Name = l.GetValue()
				case "namespace":
					ref.pod.Namespace = l.GetValue()
				}
			}
			if ctrs[ref] == nil {
				ctrs[ref] = &point{}
			}
			set(ctrs[ref], m)
		}
	}
	each("container_cpu_usage_seconds_total", func(p *point, m *dto.Metric) { p.cpu, p.at = uint64(value(m)*1e9), at(m) })
	each("container_memory_working_set_bytes", func(p *point, m *dto.Metric) { p.mem, p.at = uint64(value(m)), at(m) })
	each("container_start_time_seconds", func(p *point, m *dto.Metric) { p.start = time.Unix(0, int64(value(m)*1e9)) })
	incomplete := map[types.NamespacedName]bool{}
	for ref, p := range ctrs {
		if p.cpu == 0 || p.mem == 0 {
			// Upstream drops the whole pod from this scrape.
			incomplete[ref.pod] = true
			continue
		}
		if b.pods[ref.pod] == nil {
			b.pods[ref.pod] = map[string]point{}
		}
		b.pods[ref.pod][ref.name] = *p
	}
	for ref := range incomplete {
		delete(b.pods, ref)
	}
	return b, nil
}
