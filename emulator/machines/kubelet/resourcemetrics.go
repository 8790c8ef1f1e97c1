package kubelet

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's /metrics/resource, as pkg/kubelet/metrics/collectors/
// resource_metrics.go (k8s.io/kubernetes v1.36.3) renders it from the
// Summary's CPU and memory: the names, help strings and labels are its
// descriptors', the help prefixed with the stability level as
// k8s.io/component-base v0.36.3 metrics/desc.go annotates it ("[STABLE] "),
// and the usage samples carry the stats' time as their timestamp.
// scrape_error is not served: it is ALPHA, deprecated in 1.29.0, and
// component-base hides an ALPHA metric from the minor release after its
// deprecation (metrics/registry.go shouldHide), so a 1.36 kubelet has
// only resource_scrape_error.
var (
	nodeCPUDesc         = desc("node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds")
	nodeMemDesc         = desc("node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes")
	nodeSwapDesc        = desc("node_swap_usage_bytes", "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems")
	containerCPUDesc    = desc("container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", "container", "pod", "namespace")
	containerMemDesc    = desc("container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", "container", "pod", "namespace")
	containerSwapDesc   = desc("container_swap_usage_bytes", "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", "container", "pod", "namespace")
	containerStartDesc  = desc("container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", "container", "pod", "namespace")
	podCPUDesc          = desc("pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", "pod", "namespace")
	podMemDesc          = desc("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", "pod", "namespace")
	podSwapDesc         = desc("pod_swap_usage_bytes", "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", "pod", "namespace")
	resourceScrapeError = desc("resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// resourceCollector renders one Summary, or the error getting it.
type resourceCollector struct {
	s   *statsapi.Summary
	err error
}

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemDesc, nodeSwapDesc, containerCPUDesc, containerMemDesc, containerSwapDesc, containerStartDesc, podCPUDesc, podMemDesc, podSwapDesc, resourceScrapeError} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	errs := 0.0
	if c.err != nil {
		errs = 1
	}
	ch <- prometheus.MustNewConstMetric(resourceScrapeError, prometheus.GaugeValue, errs)
	if c.s == nil {
		return
	}
	at := func(t time.Time, d *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.NewMetricWithTimestamp(t, prometheus.MustNewConstMetric(d, typ, v, labels...))
	}
	n := c.s.Node
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		at(n.CPU.Time.Time, nodeCPUDesc, prometheus.CounterValue, seconds(*n.CPU.UsageCoreNanoSeconds))
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		at(n.Memory.Time.Time, nodeMemDesc, prometheus.GaugeValue, float64(*n.Memory.WorkingSetBytes))
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		at(n.Swap.Time.Time, nodeSwapDesc, prometheus.GaugeValue, float64(*n.Swap.SwapUsageBytes))
	}
	for _, p := range c.s.Pods {
		name, ns := p.PodRef.Name, p.PodRef.Namespace
		for _, ctr := range p.Containers {
			if ctr.StartTime.Unix() > 0 {
				ch <- prometheus.MustNewConstMetric(containerStartDesc, prometheus.GaugeValue, float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, name, ns)
			}
			if ctr.CPU != nil && ctr.CPU.UsageCoreNanoSeconds != nil {
				at(ctr.CPU.Time.Time, containerCPUDesc, prometheus.CounterValue, seconds(*ctr.CPU.UsageCoreNanoSeconds), ctr.Name, name, ns)
			}
			if ctr.Memory != nil && ctr.Memory.WorkingSetBytes != nil {
				at(ctr.Memory.Time.Time, containerMemDesc, prometheus.GaugeValue, float64(*ctr.Memory.WorkingSetBytes), ctr.Name, name, ns)
			}
			if ctr.Swap != nil && ctr.Swap.SwapUsageBytes != nil {
				at(ctr.Swap.Time.Time, containerSwapDesc, prometheus.GaugeValue, float64(*ctr.Swap.SwapUsageBytes), ctr.Name, name, ns)
			}
		}
		if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			at(p.CPU.Time.Time, podCPUDesc, prometheus.CounterValue, seconds(*p.CPU.UsageCoreNanoSeconds), name, ns)
		}
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			at(p.Memory.Time.Time, podMemDesc, prometheus.GaugeValue, float64(*p.Memory.WorkingSetBytes), name, ns)
		}
		if p.Swap != nil && p.Swap.SwapUsageBytes != nil {
			at(p.Swap.Time.Time, podSwapDesc, prometheus.GaugeValue, float64(*p.Swap.SwapUsageBytes), name, ns)
		}
	}
}

func seconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }

// serveResourceMetrics is GET /metrics/resource, in the Prometheus text
// format (version 0.0.4) that metrics-server parses, after a comment line
// saying the numbers are simulated (a "#" line that is not HELP or TYPE is
// a comment to every parser of the format).
func (k *Kubelet) serveResourceMetrics(w http.ResponseWriter, r *http.Request) {
	s, err := k.summary(r.Context(), time.Now())
	reg := prometheus.NewRegistry()
	reg.MustRegister(resourceCollector{s: s, err: err})
	families, gerr := reg.Gather()
	if gerr != nil {
		http.Error(w, gerr.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	b.WriteString(SimulatedComment + "\n")
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&b, format)
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", string(format))
	w.Header().Set(SimulatedHeader, "true")
	_, _ = io.Copy(w, &b)
}
