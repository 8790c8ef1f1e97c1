// Package doctor diagnoses a mixed Linux/Windows cluster: it reads what the
// workload cluster (and, when given, its management cluster) holds, and
// reports each problem it finds with the change that fixes it. Each check is
// a function over one snapshot of the cluster, so a check can be run and
// tested alone.
package doctor

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Severity says how bad a finding is.
type Severity string

const (
	// Info reports what the cluster is (Windows nodes per build); it never
	// changes the exit status.
	Info Severity = "info"
	// Warning is something that works today but bites later or sometimes.
	Warning Severity = "warning"
	// Error is something broken now.
	Error Severity = "error"
)

func (s Severity) rank() int {
	switch s {
	case Error:
		return 2
	case Warning:
		return 1
	}
	return 0
}

// Finding is one thing a check saw, with what to do about it.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Object is the object concerned, as kind/namespace/name or kind/name.
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Report is what a run of the doctor found.
type Report struct {
	// Checks are the names of the checks that ran, in order.
	Checks   []string  `json:"checks"`
	Findings []Finding `json:"findings"`
}

// ExitCode is 0 for a clean cluster, 1 with warnings and 2 with errors.
func (r Report) ExitCode() int {
	worst := 0
	for _, f := range r.Findings {
		if n := f.Severity.rank(); n > worst {
			worst = n
		}
	}
	return worst
}

// Count returns how many findings have severity s.
func (r Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Options say what to examine.
type Options struct {
	// Workload reads the workload cluster; WorkloadConfig reaches its API
	// server (for its version and its serving certificate).
	Workload       client.Client
	WorkloadConfig *rest.Config
	// Management, when set, is the management cluster holding the cluster's
	// AzureMachines and AzureMachinePools; Namespace and ClusterName narrow
	// what is read there (empty: every namespace, every cluster).
	Management  client.Client
	Namespace   string
	ClusterName string
	// Now is the time certificates are judged against; time.Now when zero.
	Now time.Time
	// CertWarning is how close to its expiry a certificate is reported;
	// 30 days when zero.
	CertWarning time.Duration
	// Azure says the cluster's network is Azure's (VNet MTU 1400). True for
	// every winkube cluster, the local world included, which behaves as Azure.
	Azure bool
}

// Check is one diagnosis over a snapshot of the cluster.
type Check struct {
	Name string
	Run  func(*State) []Finding
}

// Checks are the workload-cluster checks, in the order they are reported.
var Checks = []Check{
	{"windows-nodes", WindowsNodes},
	{"platform-mismatch", PlatformMismatch},
	{"windows-build-pins", WindowsBuildPins},
	{"os-selection", UnselectedWorkloads},
	{"daemonsets-on-windows", DaemonSetsOnWindows},
	{"windows-networking-pods", WindowsNetworkingPods},
	{"cloud-provider", UninitializedNodes},
	{"cni-vxlan", CNIVXLAN},
	{"hostprocess-feature-gate", HostProcessFeatureGate},
	{"dockershim", Dockershim},
	{"version-skew", VersionSkew},
	{"windows-service-backends", WindowsServiceBackends},
	{"windows-services", WindowsServices},
	{"secrets-on-windows", SecretsOnWindows},
	{"windows-pod-limits", WindowsPodLimits},
	{"services", ServiceSelectors},
	{"load-balancers", LoadBalancers},
}

// Run reads the cluster once and runs every check over it.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.CertWarning == 0 {
		o.CertWarning = 30 * 24 * time.Hour
	}
	s, err := Load(ctx, o.Workload, o.WorkloadConfig)
	if err != nil {
		return Report{}, err
	}
	s.Azure = o.Azure
	var r Report
	for _, c := range Checks {
		r.Checks = append(r.Checks, c.Name)
		r.Findings = append(r.Findings, c.Run(s)...)
	}
	r.Checks = append(r.Checks, "certificates")
	r.Findings = append(r.Findings, Certificates(ctx, o.WorkloadConfig, o.Now, o.CertWarning)...)
	if o.Management != nil {
		r.Checks = append(r.Checks, "machines")
		f, err := FailedMachines(ctx, o.Management, o.Namespace, o.ClusterName)
		if err != nil {
			return r, fmt.Errorf("reading the management cluster: %w", err)
		}
		r.Findings = append(r.Findings, f...)
	}
	SortFindings(r.Findings)
	return r, nil
}

// SortFindings puts errors first, then warnings, then information, keeping
// each check's own order within a severity (the order doctor and the plan
// commands print).
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity.rank() > fs[j].Severity.rank() })
}
