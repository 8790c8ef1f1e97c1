// Package machinelogs reads the logs of a VM or scale-set instance
// through Azure, not through the node's network: a machine that never
// joined is often one nobody can reach. It asks the VM agent to print the
// log (Run Command), and when the agent cannot (not running yet, or the
// image has none), reads what the VM wrote to its serial port (boot
// diagnostics).
//
// CAPZ instead installs a VM extension on Windows machines that waits for a
// sentinel file written at the end of the bootstrap
// (CAPZ.Windows.Bootstrapping, azure/services/vmextensions); it says that
// the bootstrap failed but not why, and kept cloudbase-init's errors out of
// sight (kubernetes-sigs/cluster-api-provider-azure #5482), so CAPZ turned
// it off by default (#6316). Reading the log only after a deadline adds no
// extension to a machine's boot and brings the cause.
package machinelogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Target is the machine whose log is read: a VM, or (ScaleSet and
// InstanceID set) a scale-set instance.
type Target struct {
	ResourceGroup string
	VM            string
	ScaleSet      string
	InstanceID    string
	Windows       bool
}

func (t Target) String() string {
	if t.ScaleSet != "" {
		return fmt.Sprintf("instance %s of scale set %s", t.InstanceID, t.ScaleSet)
	}
	return "VM " + t.VM
}

// Lines is how much of the log's end is read: enough for the failing step
// and its error; Run Command returns at most the output's last 4,096 bytes
// anyway (https://learn.microsoft.com/azure/virtual-machines/windows/run-command#restrictions).
const Lines = 40

// Log paths where the images' bootstrap writes: cloudbase-init's log as
// image-builder configures it for CAPZ's Windows images
// (kubernetes-sigs/image-builder @ae63061e,
// images/capi/ansible/windows/roles/cloudbase-init/templates/cloudbase-init.conf:
// logdir and logfile), and cloud-init's output log on Ubuntu, the one CAPZ's
// log collector reads too (cluster-api-provider-azure @69ec3a40,
// test/e2e/azure_logcollector.go).
const (
	WindowsLog = `C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\cloudbase-init.log`
	LinuxLog   = "/var/log/cloud-init-output.log"
)

// Sources of a Log.
const (
	FromRunCommand      = "Run Command"
	FromBootDiagnostics = "boot diagnostics"
)

// Log is the end of a machine's bootstrap log and where it came from.
type Log struct {
	Source string
	Text   string
	// RunCommandErr is why Run Command gave nothing, when the log came
	// from boot diagnostics instead.
	RunCommandErr error
}

// Service reads machines' bootstrap logs in one subscription.
type Service struct {
	vms   *armcompute.VirtualMachinesClient
	insts *armcompute.VirtualMachineScaleSetVMsClient
	http  policy.Transporter
}

// New makes the service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	vms, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachinesClient)
	if err != nil {
		return nil, err
	}
	insts, err := endpoint.NewClient(cfg, subscription, armcompute.NewVirtualMachineScaleSetVMsClient)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.ClientOptions()
	if err != nil {
		return nil, err
	}
	s := &Service{vms: vms, insts: insts, http: opts.Transport}
	if s.http == nil {
		s.http = http.DefaultClient
	}
	return s, nil
}

// KubeletScript prints the end of the kubelet's log: where the images'
// kubelet service writes it on Windows (kube-log-runner to
// C:\var\log\kubelet\kubelet.log, image-builder @ae63061e
// images/capi/ansible/windows/roles/kubernetes/tasks/sc.yml), its
// journal unit on Linux. kubeadm only says that the kubelet did not
// become healthy; the kubelet's log says why.
func KubeletScript(windows bool) []string {
	if windows {
		return []string{`Get-Content -Path 'C:\var\log\kubelet\kubelet.log' -Tail 20`}
	}
	return []string{"journalctl --no-pager -u kubelet.service"}
}

// Script is what Run Command runs to print the bootstrap log's end.
func Script(windows bool) []string {
	if windows {
		return []string{fmt.Sprintf("Get-Content -Path '%s' -Tail %d", WindowsLog, Lines)}
	}
	return []string{fmt.Sprintf("tail -n %d %s", Lines, LinuxLog)}
}

// Read returns the end of the machine's bootstrap log: through Run
// Command, or else from the serial console. It fails when neither gives
// anything, with both reasons.
func (s *Service) Read(ctx context.Context, t Target) (Log, error) {
	text, rcErr := s.runCommand(ctx, t)
	if rcErr == nil {
		return Log{Source: FromRunCommand, Text: text}, nil
	}
	serial, bdErr := s.serialLog(ctx, t)
	if bdErr != nil {
		return Log{}, fmt.Errorf("reading the bootstrap log of %s: Run Command: %v; boot diagnostics: %w", t, rcErr, bdErr)
	}
	return Log{Source: FromBootDiagnostics, Text: Tail(serial, Lines), RunCommandErr: rcErr}, nil
}

// runCommand runs the bootstrap-log script through the VM agent and
// returns its standard output; a script that printed nothing (a log that
// is not there) is an error with its standard error.
func (s *Service) runCommand(ctx context.Context, t Target) (string, error) {
	stdout, stderr, err := s.Run(ctx, t, Script(t.Windows))
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(stdout) == "" {
		if stderr = strings.TrimSpace(stderr); stderr == "" {
			stderr = "no output"
		}
		return "", errors.New(stderr)
	}
	return stdout, nil
}

// Run runs a script on the machine through its VM agent (Run Command:
// PowerShell as SYSTEM on Windows, sh as root on Linux) and returns what
// it wrote. Azure returns the streams' last 4,096 bytes each, and no exit
// status: a script that failed says so on its standard error.
func (s *Service) Run(ctx context.Context, t Target, script []string) (stdout, stderr string, err error) {
	id := "RunShellScript"
	if t.Windows {
		id = "RunPowerShellScript"
	}
	in := armcompute.RunCommandInput{CommandID: to.Ptr(id), Script: to.SliceOfPtrs(script...)}
	// Azure answers within seconds to minutes; the SDK's default 30 s
	// between polls would double a short command's wait.
	poll := &runtime.PollUntilDoneOptions{Frequency: 2 * time.Second}
	var res armcompute.RunCommandResult
	if t.ScaleSet != "" {
		p, err := s.insts.BeginRunCommand(ctx, t.ResourceGroup, t.ScaleSet, t.InstanceID, in, nil)
		if err != nil {
			return "", "", err
		}
		r, err := p.PollUntilDone(ctx, poll)
		if err != nil {
			return "", "", err
		}
		res = r.RunCommandResult
	} else {
		p, err := s.vms.BeginRunCommand(ctx, t.ResourceGroup, t.VM, in, nil)
		if err != nil {
			return "", "", err
		}
		r, err := p.PollUntilDone(ctx, poll)
		if err != nil {
			return "", "", err
		}
		res = r.RunCommandResult
	}
	stdout, stderr = outputs(res)
	return stdout, stderr, nil
}

// RunStep runs a script on the machine without waiting for it: it starts
// the Run Command (token "") or resumes the one token names, polls it once,
// and returns either its output (done) or the token to resume it with. A
// reconcile that waited instead would hold its worker for as long as the
// VM agent takes (minutes on Azure). A token whose operation is gone is
// dropped (next "", not done, no error): the caller starts again. A poll
// that failed returns the error with the token still to resume.
func (s *Service) RunStep(ctx context.Context, t Target, script []string, token string) (next string, done bool, stdout, stderr string, err error) {
	id := "RunShellScript"
	if t.Windows {
		id = "RunPowerShellScript"
	}
	in := armcompute.RunCommandInput{CommandID: to.Ptr(id), Script: to.SliceOfPtrs(script...)}
	var res armcompute.RunCommandResult
	if t.ScaleSet != "" {
		next, done, err = pollOnce(ctx, token, &res, func() (*runtime.Poller[armcompute.VirtualMachineScaleSetVMsClientRunCommandResponse], error) {
			return s.insts.BeginRunCommand(ctx, t.ResourceGroup, t.ScaleSet, t.InstanceID, in,
				&armcompute.VirtualMachineScaleSetVMsClientBeginRunCommandOptions{ResumeToken: token})
		})
	} else {
		next, done, err = pollOnce(ctx, token, &res, func() (*runtime.Poller[armcompute.VirtualMachinesClientRunCommandResponse], error) {
			return s.vms.BeginRunCommand(ctx, t.ResourceGroup, t.VM, in, &armcompute.VirtualMachinesClientBeginRunCommandOptions{ResumeToken: token})
		})
	}
	if !done || err != nil {
		return next, false, "", "", err
	}
	stdout, stderr = outputs(res)
	return "", true, stdout, stderr, nil
}

// runCommandResponse is either client's Run Command response.
type runCommandResponse interface {
	armcompute.VirtualMachinesClientRunCommandResponse | armcompute.VirtualMachineScaleSetVMsClientRunCommandResponse
}

// pollOnce starts or resumes an operation (begin) and polls it once: its
// result into res when done, else its resume token. An operation gone (404
// on a resumed token) is reported not done with no token, so that it is
// started again.
func pollOnce[T runCommandResponse](ctx context.Context, token string, res *armcompute.RunCommandResult, begin func() (*runtime.Poller[T], error)) (next string, done bool, err error) {
	p, err := begin()
	if err != nil {
		return "", false, err
	}
	if !p.Done() {
		if _, err := p.Poll(ctx); err != nil {
			if token != "" && async.IsNotFound(err) {
				return "", false, nil
			}
			// The request failed, not the command (throttled, cut off, a
			// manager stopping): it runs on, and is resumed rather than
			// started again, which the VM agent would refuse meanwhile.
			if next, terr := p.ResumeToken(); terr == nil {
				token = next
			}
			return token, false, err
		}
	}
	if p.Done() {
		r, err := p.Result(ctx)
		if err != nil {
			return "", false, err
		}
		switch r := any(r).(type) {
		case armcompute.VirtualMachinesClientRunCommandResponse:
			*res = r.RunCommandResult
		case armcompute.VirtualMachineScaleSetVMsClientRunCommandResponse:
			*res = r.RunCommandResult
		}
		return "", true, nil
	}
	next, err = p.ResumeToken()
	return next, false, err
}

// ReadStep is Read without waiting for Run Command: it starts or resumes
// the log script's Run Command (token), and once that is done returns the
// log, read from the serial console when Run Command gave nothing. While
// the command runs it returns its resume token and done false (with the
// error of a poll that failed, the command still to resume).
func (s *Service) ReadStep(ctx context.Context, t Target, token string) (next string, l Log, done bool, err error) {
	next, done, stdout, stderr, rcErr := s.RunStep(ctx, t, Script(t.Windows), token)
	if !done && (rcErr == nil || next != "") {
		return next, Log{}, false, rcErr
	}
	if rcErr == nil {
		if strings.TrimSpace(stdout) != "" {
			return "", Log{Source: FromRunCommand, Text: stdout}, true, nil
		}
		if stderr = strings.TrimSpace(stderr); stderr == "" {
			stderr = "no output"
		}
		rcErr = errors.New(stderr)
	}
	serial, bdErr := s.serialLog(ctx, t)
	if bdErr != nil {
		return "", Log{}, true, fmt.Errorf("reading the bootstrap log of %s: Run Command: %v; boot diagnostics: %w", t, rcErr, bdErr)
	}
	return "", Log{Source: FromBootDiagnostics, Text: Tail(serial, Lines), RunCommandErr: rcErr}, true, nil
}

// outputs are a Run Command result's standard output and error: Azure
// returns each as an instance-view status whose code names the stream
// ("ComponentStatus/StdOut/succeeded", "ComponentStatus/StdErr/succeeded";
// Azure/azure-rest-api-specs @720adf86,
// specification/compute/resource-manager/Microsoft.Compute/ComputeRP/stable/2024-11-01/examples/runCommandExamples/VirtualMachineRunCommand.json).
func outputs(r armcompute.RunCommandResult) (stdout, stderr string) {
	for _, st := range r.Value {
		code := strings.ToLower(ptr.Deref(st.Code, ""))
		switch {
		case strings.Contains(code, "/stdout/"):
			stdout += ptr.Deref(st.Message, "")
		case strings.Contains(code, "/stderr/"):
			stderr += ptr.Deref(st.Message, "")
		}
	}
	return stdout, stderr
}

// serialLog reads the serial console log through the SAS URI that
// retrieveBootDiagnosticsData hands out: a plain HTTPS GET, as for any
// blob with a SAS token.
func (s *Service) serialLog(ctx context.Context, t Target) (string, error) {
	var uri *string
	if t.ScaleSet != "" {
		r, err := s.insts.RetrieveBootDiagnosticsData(ctx, t.ResourceGroup, t.ScaleSet, t.InstanceID, nil)
		if err != nil {
			return "", err
		}
		uri = r.SerialConsoleLogBlobURI
	} else {
		r, err := s.vms.RetrieveBootDiagnosticsData(ctx, t.ResourceGroup, t.VM, nil)
		if err != nil {
			return "", err
		}
		uri = r.SerialConsoleLogBlobURI
	}
	if ptr.Deref(uri, "") == "" {
		return "", errors.New("Azure returned no serial console log URI")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *uri, nil)
	if err != nil {
		return "", err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("reading the serial console log: %s", resp.Status)
	}
	return string(body), nil
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
