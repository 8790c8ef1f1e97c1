// Package nodejoin adds a Windows Server machine that no Cluster API
// provider created to a kubeadm-based cluster, the path the seeds' KubeCon
// talk walks by hand (Install-WindowsFeature containers, sig-windows-tools'
// PrepareNode.ps1, kubeadm join): it checks the cluster and the machine
// first, creates a bootstrap token as kubeadm does, and renders the
// PowerShell that prepares and joins the machine, to print or to run over
// SSH.
package nodejoin

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// Options say which machine joins and how.
type Options struct {
	// Node is the machine's host name, which becomes the node's name.
	Node string
	// WindowsVersion is the machine's release: 2019, 2022 or 2025.
	WindowsVersion infrav1.WindowsServerVersion
	// APIServer is host:port of the API server as the machine reaches it;
	// empty: the server kube-public/cluster-info publishes.
	APIServer string
	// TokenTTL is the bootstrap token's lifetime (kubeadm's 24h when 0).
	TokenTTL time.Duration
	// ContainerdVersion overrides the version taken from the cluster.
	ContainerdVersion string
	// PrintScript only prints the script (with a real token) and does not
	// run it.
	PrintScript bool
	// Wait is how long the post-join check waits for the node to be Ready
	// with its kube-proxy and CNI pods Running (0: no check).
	Wait time.Duration
	// ApplyAddons applies the Windows add-ons the cluster lacks
	// (kube-proxy-windows, the CNI's Windows DaemonSet) before joining;
	// without it their absence fails the preflight.
	ApplyAddons bool
	// FlannelWindowsImage and KubeProxyWindowsImage are the images
	// ApplyAddons uses on a flannel cluster (none is published).
	FlannelWindowsImage, KubeProxyWindowsImage string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Validate checks the options alone, before the cluster is reached.
func (o *Options) Validate() error {
	var errs []error
	if o.Node == "" {
		errs = append(errs, errors.New("name the machine: its host name, which becomes the node's name"))
	}
	if _, ok := images.WindowsBuild[o.WindowsVersion]; !ok {
		errs = append(errs, fmt.Errorf("--windows-version %q: use 2019, 2022 or 2025", o.WindowsVersion))
	}
	if o.TokenTTL < 0 {
		errs = append(errs, fmt.Errorf("--token-ttl %s: a token must live a while (kubeadm's default is %s)", o.TokenTTL, DefaultTokenTTL))
	}
	if o.ContainerdVersion != "" && !containerdVersion(o.ContainerdVersion) {
		errs = append(errs, fmt.Errorf("--containerd-version %q is not a release such as 1.7.25 or 2.1.4 (no leading v)", o.ContainerdVersion))
	}
	if o.APIServer != "" {
		if _, err := APIServerHostPort("https://" + o.APIServer); err != nil || !strings.Contains(o.APIServer, ":") {
			errs = append(errs, fmt.Errorf("--api-server %q: give host:port as the machine reaches the API server", o.APIServer))
		}
	}
	return errors.Join(errs...)
}

func containerdVersion(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// Runner runs a command on the machine (an SSH connection to its Windows
// OpenSSH, whose shell is PowerShell).
type Runner interface {
	Run(cmd string, stdout, stderr io.Writer) error
}

// Result is what a join did.
type Result struct {
	Cluster  *Cluster
	Findings []Finding
	Plan     Plan
	Script   string
	// PostJoin are the post-join check's findings; Diagnosis is the tail
	// of the machine's logs when the script or the check failed.
	PostJoin  []Finding
	Diagnosis string
}

// PreflightError is a preflight that found errors; nothing was created.
type PreflightError struct{ Findings []Finding }

func (e *PreflightError) Error() string {
	var b strings.Builder
	b.WriteString("preflight failed, nothing was changed:")
	for _, f := range e.Findings {
		if f.Severity == Error {
			b.WriteString("\n  " + f.String())
		}
	}
	return b.String()
}

// Run checks the cluster, creates the token, renders the script and, with
// a runner and without PrintScript, runs it on the machine. The cluster
// is reached with cfg; out is told what happens.
func Run(ctx context.Context, cfg *rest.Config, o Options, runner Runner, out io.Writer) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	c, err := Inspect(ctx, cs, cl)
	if err != nil {
		return nil, err
	}
	machine := Machine{Name: o.Node, WindowsVersion: o.WindowsVersion}
	res := &Result{Cluster: c, Findings: Preflight(c, machine)}
	for _, f := range res.Findings {
		fmt.Fprintln(out, "winkube: preflight: "+f.String())
	}
	if Failed(res.Findings) && (!o.ApplyAddons || !onlyMissingAddons(res.Findings)) {
		return res, &PreflightError{Findings: res.Findings}
	}
	api := o.APIServer
	if api == "" {
		if api, err = APIServerHostPort(c.Server); err != nil {
			return res, err
		}
	}
	if Failed(res.Findings) {
		if err := applyAddons(ctx, cl, c, o, api, out); err != nil {
			return res, err
		}
		if c, err = Inspect(ctx, cs, cl); err != nil {
			return res, err
		}
		res.Cluster, res.Findings = c, Preflight(c, machine)
		for _, f := range res.Findings {
			fmt.Fprintln(out, "winkube: preflight after applying the add-ons: "+f.String())
		}
		if Failed(res.Findings) {
			return res, &PreflightError{Findings: res.Findings}
		}
	}
	ctr := o.ContainerdVersion
	if ctr == "" {
		if ctr = c.WindowsContainerd[o.WindowsVersion]; ctr == "" {
			ctr = DefaultContainerd
		}
	}
	ttl := o.TokenTTL
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	tok, err := CreateToken(ctx, cs, ttl, now(), o.Node)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "winkube: created bootstrap token %s (kube-system/bootstrap-token-%s), expires %s\n", tok.ID, tok.ID, tok.Expires.Format(time.RFC3339))
	res.Plan = Plan{
		NodeName: strings.ToLower(o.Node), WindowsVersion: o.WindowsVersion, KubernetesVersion: kubeProxyTag(c.GitVersion),
		ContainerdVersion: ctr, PauseImage: PauseImage(o.WindowsVersion), APIServer: api, Token: tok.String(), TokenExpires: tok.Expires, CAHash: c.CAHash,
		CNI: c.CNI.Name, CloudTaint: c.ExternalCloudProvider,
	}
	if res.Script, err = Script(res.Plan); err != nil {
		return res, err
	}
	if o.PrintScript || runner == nil {
		return res, nil
	}
	fmt.Fprintf(out, "winkube: running the join script on %s (its transcript: %s)\n", o.Node, TranscriptPath)
	var transcript bytes.Buffer
	sout := &lockedWriter{w: out}
	if err := runner.Run(EncodedCommand(res.Script), io.MultiWriter(sout, &transcript), sout); err != nil {
		step, failure := FailedStep(transcript.String())
		res.Diagnosis = Diagnose(runner, diagnosisLines)
		fmt.Fprint(out, res.Diagnosis)
		where := "before its first step (the machine did not run it: see its shell's message above)"
		if step != "" {
			where = "in step " + step
		}
		if failure != "" {
			where += ": " + failure
		}
		return res, fmt.Errorf("the join script failed on %s %s: %w", o.Node, where, err)
	}
	if o.Wait <= 0 {
		return res, nil
	}
	fmt.Fprintf(out, "winkube: waiting up to %s for node %s to be Ready with kube-proxy and the CNI running\n", o.Wait, res.Plan.NodeName)
	if res.PostJoin, err = WaitJoined(ctx, cs, res.Plan.NodeName, o.Wait); err != nil {
		return res, err
	}
	if len(res.PostJoin) > 0 {
		var msgs []string
		for _, f := range res.PostJoin {
			fmt.Fprintln(out, "winkube: post-join: "+f.String())
			msgs = append(msgs, f.Problem)
		}
		res.Diagnosis = Diagnose(runner, diagnosisLines)
		fmt.Fprint(out, res.Diagnosis)
		return res, fmt.Errorf("node %s joined but is not working after %s: %s", res.Plan.NodeName, o.Wait, strings.Join(msgs, "; "))
	}
	fmt.Fprintf(out, "winkube: node %s is Ready, with kube-proxy and the CNI running\n", res.Plan.NodeName)
	return res, nil
}

// lockedWriter lets an SSH session's stdout and stderr, which its client
// copies in two goroutines, share one writer that is not safe for
// concurrent use: given a bytes.Buffer, io.Copy calls its ReadFrom, and
// the stderr copy, ending last, cut what stdout wrote meanwhile.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// diagnosisLines is how much of each log a diagnosis shows.
const diagnosisLines = 20

// EncodedCommand is the command line that runs script in Windows
// PowerShell: -EncodedCommand takes the script as base64 of UTF-16LE, so
// no quoting of the SSH command line can change it.
func EncodedCommand(script string) string {
	u := utf16.Encode([]rune(script))
	b := make([]byte, 0, 2*len(u))
	for _, r := range u {
		b = append(b, byte(r), byte(r>>8))
	}
	return "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand " + base64.StdEncoding.EncodeToString(b)
}
