package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/nodelogs"
)

// Ways logs reaches a node (--via).
const (
	viaAuto       = "auto"
	viaSSH        = "ssh"
	viaRunCommand = "run-command"
)

// logsOptions is `winkube logs`'s input, split as generate cluster's is
// (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); nodelogs collects.
type logsOptions struct {
	accessOptions
	// Node is the MACHINE|NODE argument.
	Node           string
	mgmtKubeconfig string
	via            string
	output         string
	oldOutput      string
	since          time.Duration
	customClouds   []string
}

// clouds are the --custom-cloud values, with their CA files read.
func (o *logsOptions) clouds() ([]cloud.CustomCloud, error) {
	var out []cloud.CustomCloud
	for _, v := range o.customClouds {
		c, caFile, err := cloud.ParseCustomCloud(v)
		if err != nil {
			return nil, badInputf(o.cmd, "--custom-cloud %v", err)
		}
		if caFile != "" {
			if c.CACertPEM, err = os.ReadFile(caFile); err != nil {
				return nil, fmt.Errorf("--custom-cloud %s: %w", c.Name, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func newLogsCommand() *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs MACHINE|NODE",
		Short: "Collect a node's logs, over SSH or through Azure's Run Command, into a folder or a tar archive",
		Long: `logs collects what CAPZ's log collector gathers from a machine:

  Windows  cloudbase-init's logs, the kubelet's (and its folder), containerd's,
           kube-proxy's and the CNI's logs, Get-Service states, HNS networks,
           endpoints and policies, IP configuration, event logs (reboots,
           service control manager, Hyper-V), containers and crash dumps
  Linux    cloud-init's logs, the kubelet's and containerd's journals, the
           CNI's, kube-proxy's and kube-apiserver's logs, the kubelet version,
           the bootstrap sentinel folder, the whole journal and the kernel's

MACHINE|NODE is a Node, Machine, AzureMachine, AzureMachinePoolMachine, VM or
computer name. A machine that never joined has no node: name its Machine or
AzureMachine ('kubectl get machines,azuremachines -A' lists them).

Two ways to the machine (--via):
  ssh          the 'winkube ssh' path: through a control-plane VM as jump host
               to the node's private address.
  run-command  Azure's Run Command: the VM agent runs each command (PowerShell
               as SYSTEM on Windows, sh as root on Linux), acting as the
               cluster's AzureClusterIdentity, without the node's network. It
               works for a machine that never joined. Azure returns the last
               4,096 bytes of each command's output and runs one command at a
               time per VM (each takes seconds to a minute on Azure), and gives
               no exit status: a command that wrote an error counts as failed.
  auto         (default) SSH, and Run Command when SSH cannot reach the node.
Run Command needs to know the cluster's Azure: a local world's (--local NAME or
--state-dir DIR), else Azure's public cloud or the AzureCluster's
azureEnvironment, acting as its identityRef (without one, your own Azure
credential: az login or AZURE_* variables). A Custom azureEnvironment is
refused unless its endpoints are the local world's or exactly those you pass
with --custom-cloud: whoever may edit the AzureCluster would otherwise
choose where the identity's secret is sent.

Each command's output goes into a file of --write-to: a new folder, or a .tar /
.tar.gz archive. A command that fails does not stop the others: its error
output is kept beside it as FILE.error. Commands the machine cannot run are
attempted and recorded as failed with its refusal (a local world's emulated
machines answer only what winkube simulates: files on their disk, the
journal's units, HNS, the kubelet version). --since keeps only lines stamped
from then on.

Every collection has an index, index.json: the machine, when the collection
ran, the transport and why Run Command was used, and for each file its command,
bytes, transport, whether its output reached Run Command's limit (its beginning
is then cut), and its error.

` + accessExamples + `
  --management-kubeconfig is --kubeconfig under the name 'winkube doctor' uses.`,
		Example: `  winkube logs win-p8k2x-7tq4m
  winkube logs --local winkube winkube-md-win-abcde-fghij --since 30m --write-to win.tar.gz
  # a machine that never joined, in a local world: by its Machine name
  winkube logs --state-dir ~/.winkube/winkube winkube-md-win-7d8f9-xk2p4
  # in a real management cluster, through Azure only
  winkube logs --management-kubeconfig mgmt.kubeconfig -n default --cluster demo demo-md-win-7d8f9-xk2p4 --via run-command`,
		Args: oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Node = args[0]
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
		},
	}
	o.addFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.mgmtKubeconfig, "management-kubeconfig", "", "kubeconfig of the management cluster (as --kubeconfig)")
	f.StringVar(&o.via, "via", viaAuto, "how to reach the machine: auto (SSH, else Run Command), ssh, or run-command (Azure's VM agent)")
	f.StringVar(&o.output, "write-to", "", "folder, or .tar/.tar.gz archive, to write (default NODE-logs-TIME)")
	f.StringVarP(&o.oldOutput, "output", "o", "", "")
	_ = f.MarkHidden("output")
	f.DurationVar(&o.since, "since", 0, "only lines stamped within this long before now (e.g. 30m, 2h)")
	f.BoolVar(&o.useMyAzureLogin, "use-my-azure-login", false, "with Run Command: "+useMyAzureLoginUsage)
	f.StringArrayVar(&o.customClouds, "custom-cloud", nil, "with --via run-command, a cloud besides Azure's named ones that the AzureCluster's Custom azureEnvironment may name: name=NAME,arm=https://...,entra=https://...[,ca-file=PATH] (repeatable); the identity's secret goes to no other host")
	return cmd
}

// Validate refuses, before the management cluster is asked, what logs
// cannot do: besides its own flags, a login no node could take
// (accessOptions.validate) and a --custom-cloud that does not parse, which
// was otherwise read only once SSH had failed.
func (o *logsOptions) Validate() error {
	if err := o.checkFlags(); err != nil {
		return err
	}
	if err := o.accessOptions.validate(); err != nil {
		return err
	}
	for _, v := range o.customClouds {
		if _, _, err := cloud.ParseCustomCloud(v); err != nil {
			return badInputf(nil, "--custom-cloud %v", err)
		}
	}
	return nil
}

// checkFlags refuses values of logs' own flags.
func (o *logsOptions) checkFlags() error {
	if o.oldOutput != "" {
		return badInputf(nil, "--output %q: logs writes files with --write-to %s (-o/--output is a format in winkube's commands)", o.oldOutput, o.oldOutput)
	}
	if o.since < 0 {
		return badInputf(nil, "--since %s: want a positive duration such as 30m or 2h", o.since)
	}
	switch o.via {
	case viaAuto, viaSSH, viaRunCommand:
	default:
		return badInputf(nil, "--via %q: want auto, ssh or run-command", o.via)
	}
	if o.mgmtKubeconfig != "" {
		if o.kubeconfig != "" && o.kubeconfig != o.mgmtKubeconfig {
			return badInputf(nil, "--kubeconfig and --management-kubeconfig name two kubeconfigs: pass one")
		}
		o.kubeconfig = o.mgmtKubeconfig
	}
	return nil
}

// Run collects the node's logs into --write-to, listing each file on out
// and the hops on progress.
func (o *logsOptions) Run(ctx context.Context, out, progress io.Writer) error {
	name := o.Node
	start := time.Now()
	src, err := o.source(ctx, name, progress)
	if err != nil {
		return err
	}
	defer src.close()
	if o.output == "" {
		o.output = fmt.Sprintf("%s-logs-%s", name, start.Format("20060102-150405"))
	}
	sink, err := nodelogs.NewSink(o.output)
	if err != nil {
		return err
	}
	var from time.Time
	if o.since > 0 {
		from = start.Add(-o.since)
	}
	m := src.machine
	where := m.Address
	if src.via.Name == runCommandTransport.Name {
		where = m.Azure
	}
	fmt.Fprintf(out, "collecting the logs of %s (%s, %s) through %s into %s\n", m.Hostname, m.OS, where, src.via.Name, o.output)
	results, err := nodelogs.Collect(src.runner, src.via, nodelogs.Plan(m.OS == "Windows"), from, sink, func(r nodelogs.Result) {
		switch {
		case r.Err != nil:
			fmt.Fprintf(out, "  %-32s failed: %s\n", r.File, firstLine(r))
		case r.Truncated:
			fmt.Fprintf(out, "  %-32s %d bytes (the end only: %s returns at most %d)\n", r.File, r.Bytes, src.via.Name, src.via.Limit)
		default:
			fmt.Fprintf(out, "  %-32s %d bytes\n", r.File, r.Bytes)
		}
	})
	if err == nil {
		idx := nodelogs.NewIndex(m, src.via, results, start, time.Now(), from)
		idx.WhyRunCommand = src.why
		err = idx.Write(sink)
	}
	if cerr := sink.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	fmt.Fprintf(out, "%d of %d collected in %s; %s lists them\n", len(results)-failed, len(results), time.Since(start).Round(time.Millisecond), nodelogs.IndexFile)
	if failed == len(results) {
		return fmt.Errorf("no log could be collected from %s", name)
	}
	return nil
}

// logSource is the machine and the way its commands are run.
type logSource struct {
	machine nodelogs.Machine
	runner  nodelogs.Runner
	via     nodelogs.Transport
	why     string
	close   func()
}

// source reaches the machine over SSH, or through Run Command when asked
// to or when SSH cannot; a name nobody knows, or a management cluster that
// cannot be read, is said once, not once per way.
func (o *logsOptions) source(ctx context.Context, name string, progress io.Writer) (*logSource, error) {
	why := "--via run-command"
	if o.via != viaRunCommand {
		conn, err := o.connect(ctx, name, progress)
		if err == nil {
			t := conn.Target
			return &logSource{
				machine: nodelogs.Machine{Name: name, Object: t.Object, Cluster: t.Cluster, Namespace: t.Namespace, Hostname: t.Hostname, Address: t.Address, OS: string(t.OS)},
				runner:  conn, via: nodelogs.Transport{Name: "SSH"}, close: func() { conn.Close() },
			}, nil
		}
		if o.via == viaSSH {
			return nil, err
		}
		why = "SSH could not reach it: " + err.Error()
		fmt.Fprintf(progress, "winkube: %s\nwinkube: reading its logs through Azure's Run Command instead\n", why)
		src, rcErr := o.runCommandSource(ctx, name, why)
		var mgmt managementError
		var unknown unknownMachineError
		switch {
		case rcErr == nil:
			return src, nil
		case errors.As(rcErr, &unknown):
			return nil, rcErr
		case errors.As(rcErr, &mgmt):
			// SSH's error says the same, with the local world's advice.
			return nil, err
		}
		return nil, fmt.Errorf("%s; nor through Run Command: %w", why, rcErr)
	}
	return o.runCommandSource(ctx, name, why)
}

func (o *logsOptions) runCommandSource(ctx context.Context, name, why string) (*logSource, error) {
	if err := o.resolveLocal(); err != nil {
		return nil, err
	}
	c, ns, err := o.client()
	if err != nil {
		return nil, err
	}
	clouds, err := o.clouds()
	if err != nil {
		return nil, err
	}
	m, runner, err := o.runCommand(ctx, c, ns, name, clouds)
	if o.stateDir != "" && errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("the local world in %s is not running (start it again with 'winkube up'): %w", o.stateDir, err)
	}
	if err != nil {
		return nil, err
	}
	return &logSource{machine: m.info, runner: runner, via: runCommandTransport, why: why, close: func() {}}, nil
}

// firstLine is a failure's gist for the progress: its error output's first
// line, shortened; the index and FILE.error keep all of it.
func firstLine(r nodelogs.Result) string {
	msg := r.Err.Error()
	if r.Stderr != "" {
		msg, _, _ = strings.Cut(r.Stderr, "\n")
	}
	const most = 140
	if len(msg) > most {
		msg = msg[:most] + "..."
	}
	return msg
}
