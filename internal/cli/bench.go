package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/localworld"
)

func newBenchCommand() *cobra.Command {
	var bin string
	var sizes []string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure winkube up: time to all nodes Ready and peak memory",
		Long: `Run 'winkube up' in a scratch state directory for each size (control-plane +
Linux + Windows nodes), and print the time from start to every node Ready
with the add-ons running, the time to delete the cluster, and the peak
resident memory of this process and of the control plane's processes.
Machines here are noisy: compare runs by ratio, not by absolute seconds.`,
		Example: `  winkube bench
  winkube bench --size 1+1+2 --size 1+5+20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range sizes {
				n, err := parseSize(s)
				if err != nil {
					return badInputf(cmd, "--size %q: %v", s, err)
				}
				o := &upOptions{flavor: flavors.Windows, version: benchVersion, windowsVersion: "2022", controlPlane: n[0], linux: n[1], windows: n[2], timeout: benchTimeout}
				if err := o.check(cmd, "bench"); err != nil {
					return badInputf(cmd, "--size %q: %v", s, usageCause(err))
				}
			}
			ctrllog.SetLogger(logr.Discard())
			b, err := findBin(bin)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, s := range sizes {
				if err := benchOne(cmd.Context(), out, cmd.ErrOrStderr(), b, s); err != nil {
					return fmt.Errorf("size %s: %w", s, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&bin, "bin", "", "directory of the binaries hack/tools builds")
	cmd.Flags().StringSliceVar(&sizes, "size", []string{"1+1+2", "1+5+20"}, "cluster sizes as CONTROL-PLANE+LINUX+WINDOWS")
	return cmd
}

func benchOne(ctx context.Context, out, errOut io.Writer, bin, size string) error {
	progress := progressPrinter(errOut)
	n, err := parseSize(size)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "winkube-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	w, err := localworld.Start(ctx, localworld.Options{
		Name: "bench", Flavor: flavors.Windows, KubernetesVersion: benchVersion, ControlPlaneNodes: n[0], LinuxNodes: n[1], WindowsNodes: n[2],
		WindowsVersion: "2022", StateDir: dir, Bin: bin, Progress: progress,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	started := time.Since(start)
	if err := w.CreateCluster(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, benchTimeout)
	defer cancel()
	if err := w.WaitReady(wctx); err != nil {
		return err
	}
	ready := time.Since(start)
	cpRSS := 0
	for _, node := range w.Runtime().Nodes() {
		for _, pid := range node.Pids {
			cpRSS += procStatusKB(pid, "VmRSS:")
		}
	}
	del := time.Now()
	if err := w.DeleteCluster(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "size %-8s nodes %3d  management plane up %5.1fs  all nodes Ready %6.1fs  delete %5.1fs  peak RSS winkube %4d MiB  control plane %4d MiB\n",
		size, n[0]+n[1]+n[2], started.Seconds(), ready.Seconds(), time.Since(del).Seconds(), procStatusKB(os.Getpid(), "VmHWM:")/1024, cpRSS/1024)
	return nil
}

const (
	benchVersion = "v1.36.3"
	benchTimeout = 20 * time.Minute
)

// parseSize reads CONTROL-PLANE+LINUX+WINDOWS.
func parseSize(size string) ([3]int32, error) {
	var n [3]int32
	parts := strings.Split(size, "+")
	if len(parts) != 3 {
		return n, fmt.Errorf("want CONTROL-PLANE+LINUX+WINDOWS, like 1+1+2")
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return n, fmt.Errorf("%q is not a node count", p)
		}
		n[i] = int32(v)
	}
	return n, nil
}

// procStatusKB reads a kB field of /proc/PID/status (Linux).
func procStatusKB(pid int, field string) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field) {
			if f := strings.Fields(l); len(f) > 1 {
				v, _ := strconv.Atoi(f[1])
				return v
			}
		}
	}
	return 0
}
