package metricsserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
)

// Args are the flags of a metrics-server container that the model reads.
type Args struct {
	Options
	// SecurePort is --secure-port (443 by default, the generic API
	// server's; the upstream manifest sets 10250).
	SecurePort int
}

// ParseArgs reads a metrics-server container's command line as
// cmd/metrics-server/app/options (v0.8.0) does, with its defaults and its
// validation of --metric-resolution; flags the model has no use for
// (--cert-dir, logging) are accepted and ignored.
func ParseArgs(args []string) (Args, error) {
	fs := pflag.NewFlagSet("metrics-server", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	var a Args
	types := make([]string, 0, len(DefaultAddressTypes))
	for _, t := range DefaultAddressTypes {
		types = append(types, string(t))
	}
	var caFile string
	fs.DurationVar(&a.MetricResolution, "metric-resolution", 60*time.Second, "")
	fs.StringSliceVar(&types, "kubelet-preferred-address-types", types, "")
	fs.BoolVar(&a.UseNodeStatusPort, "kubelet-use-node-status-port", false, "")
	fs.IntVar(&a.KubeletPort, "kubelet-port", 10250, "")
	fs.BoolVar(&a.KubeletInsecureTLS, "kubelet-insecure-tls", false, "")
	fs.StringVar(&caFile, "kubelet-certificate-authority", "", "")
	fs.IntVar(&a.SecurePort, "secure-port", 443, "")
	// A container's command line may start with the binary.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return Args{}, err
	}
	if a.MetricResolution < 10*time.Second {
		return Args{}, fmt.Errorf("metric-resolution should be a time duration at least 10s, but value %v provided", a.MetricResolution)
	}
	if caFile != "" {
		// A file in the container: the simulated process has no file
		// system to read it from.
		return Args{}, fmt.Errorf("--kubelet-certificate-authority=%s: the simulated metrics-server reads no files; use --kubelet-insecure-tls", caFile)
	}
	a.AddressTypes = nil
	for _, t := range types {
		a.AddressTypes = append(a.AddressTypes, corev1.NodeAddressType(t))
	}
	return a, nil
}
