package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/internal/bench"
	"github.com/winkube/winkube/internal/bench/measure"
	"github.com/winkube/winkube/internal/flavors"
)

// benchOptions is `winkube bench`'s input, split as generate cluster's is
// (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); internal/bench
// measures.
type benchOptions struct {
	bin, profile, output string
	sizes                []string
	steady, timeout      time.Duration
}

// Validate refuses a format, a steady window, a timeout or a size no run could use,
// naming the flag; a size is checked as 'winkube up' checks its node
// counts, before any binary is looked for.
func (o *benchOptions) Validate() error {
	if err := checkOutput(nil, o.output, "table", "json"); err != nil {
		return err
	}
	if o.steady < 0 {
		return badInputf(nil, "--steady %s: want a duration of zero or more, such as 30s", o.steady)
	}
	if o.timeout <= 0 {
		return badInputf(nil, "--timeout %s: want a duration above zero, such as 45m", o.timeout)
	}
	for _, s := range o.sizes {
		n, err := bench.ParseSize(s)
		if err != nil {
			return badInputf(nil, "--size %q: %v", s, err)
		}
		uo := &upOptions{flavor: flavors.Windows, version: benchVersion, windowsVersion: "2022", controlPlane: n[0], linux: n[1], windows: n[2], timeout: o.timeout}
		if err := uo.check("bench"); err != nil {
			return badInputf(nil, "--size %q: %v", s, usageCause(err))
		}
	}
	return nil
}

// Run measures each size in turn, the progress on errOut and the reports
// on out.
func (o *benchOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	// The report is the output: the controllers' and client-go's log
	// lines (klog) are not kept.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	b, err := findBin(o.bin)
	if err != nil {
		return err
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}
	var reports []*bench.Report
	for _, s := range o.sizes {
		r, err := measure.Run(ctx, measure.Options{Size: s, Bin: b, KubernetesVersion: benchVersion, Timeout: o.timeout,
			Steady: o.steady, ProfileDir: o.profile, Progress: progressPrinter(errOut)})
		if err != nil {
			return fmt.Errorf("size %s: %w", s, err)
		}
		reports = append(reports, r)
		if o.output == "table" {
			r.WriteTable(out)
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	return nil
}

func newBenchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure winkube up: where the time, the requests, the CPU and the memory go",
		Long: `Run 'winkube up' in a scratch state directory for each size (control-plane +
Linux + Windows nodes) and report:
  - phases, in seconds from the start: management plane up; the first
    control plane's Machine created, its VM booting, its Node registered
    and Cluster API reaching it (ControlPlaneInitialized: the API-server
    load balancer's probe and Cluster API's cluster cache); CNI applied;
    first control plane Ready; all nodes Ready (with the add-ons running);
    and the time to delete the cluster;
  - each worker's wait for the control plane (Machine created to its
    bootstrap data), provisioning (to the VM booting), join (to Node
    registered) and Ready (to Node Ready, with the CNI pod's steps) as
    p50/p90/p99;
  - ARM requests per machine, from the emulator's counters;
  - workload API-server requests per node per minute, from the
    apiserver_request_total metric of the control planes' API servers,
    during the bring-up and in a steady window after it (--steady);
  - CPU seconds of winkube, of the workload control planes' processes and
    of the management plane, and their memory.
A run that does not complete keeps its state directory and names it, with
the logs to read of the nodes not Ready (the machine runtime's events, the
kubelet's log); remove it when done.
Phase times come from the API objects' timestamps, which have whole
seconds. Machines here are noisy: compare runs by ratio, and note the load
average the report shows.`,
		Example: `  winkube bench
  winkube bench --size 1+1+2 --size 1+20+80 -o json
  winkube bench --size 1+20+80 --profile /tmp/prof   # then: go tool pprof /tmp/prof/cpu-1+20+80-up.pprof
  winkube bench --size 1+200+800 --steady 0 --timeout 60m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	cmd.Flags().StringVar(&o.bin, "bin", "", "directory of the binaries hack/tools builds")
	cmd.Flags().StringSliceVar(&o.sizes, "size", []string{"1+1+2", "1+5+20"}, "cluster sizes as CONTROL-PLANE+LINUX+WINDOWS")
	cmd.Flags().StringVar(&o.profile, "profile", "", "directory to write winkube's CPU profiles (bring-up, steady window, delete) and heap profile (at Ready) to, per size")
	cmd.Flags().DurationVar(&o.steady, "steady", 30*time.Second, "how long to measure the running cluster after every node is Ready (0 skips it)")
	// 1+100+400 took 13 minutes to Ready on a 2-core machine: a size of a
	// thousand nodes needs more than the default to be measured at all.
	cmd.Flags().DurationVar(&o.timeout, "timeout", 20*time.Minute, "how long each size may take until every node is Ready; a run past it keeps its state directory, as a failed one does")
	outputFlag(cmd, &o.output, "table", "table", "json")
	return cmd
}

const benchVersion = "v1.36.3"
