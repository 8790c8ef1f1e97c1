package arm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/arm"
)

// runCommandWorld has a running Linux VM "lin" and Windows VM "win" in
// group "rc", and a runtime whose agent answers with answer.
func runCommandWorld(t *testing.T, answer func(id string, c arm.Command) (arm.CommandResult, error)) (*world, *armcompute.VirtualMachinesClient) {
	w := newWorld(t, nil)
	w.rt.Answer = answer
	w.group("rc")
	subnet := w.network("rc")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rc", "lin", linuxVM(*w.nic("rc", "lin-nic", subnet).ID, ""), nil))
	done(vms.BeginCreateOrUpdate(w.ctx, "rc", "win", windowsVM(*w.nic("rc", "win-nic", subnet).ID, "win", ""), nil))
	waitRunning(t, w.rt, 2)
	return w, vms
}

func script(commandID string, lines ...string) armcompute.RunCommandInput {
	in := armcompute.RunCommandInput{CommandID: to.Ptr(commandID)}
	for _, l := range lines {
		in.Script = append(in.Script, to.Ptr(l))
	}
	return in
}

// The action form returns both streams as Azure does, the last 4,096
// bytes of each, and hands the agent the OS's shell.
func TestRunCommandReturnsTheStreamsTruncatedAsAzureDoes(t *testing.T) {
	long := "first" + strings.Repeat("x", 5000) + "último"
	w, vms := runCommandWorld(t, func(_ string, c arm.Command) (arm.CommandResult, error) {
		return arm.CommandResult{Stdout: long, Stderr: "warning: " + c.Shell, ExitCode: 1}, nil
	})
	res := done(vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunShellScript", "cat /var/log/cloud-init-output.log"), nil))
	if len(res.Value) != 2 {
		t.Fatalf("statuses: %+v", res.Value)
	}
	out, errs := res.Value[0], res.Value[1]
	if *out.Code != "ComponentStatus/StdOut/succeeded" || *errs.Code != "ComponentStatus/StdErr/succeeded" || *out.DisplayStatus != "Provisioning succeeded" {
		t.Errorf("codes: %s %s %s", *out.Code, *errs.Code, *out.DisplayStatus)
	}
	if m := *out.Message; len(m) > 4096 || len(m) < 4090 || !strings.HasSuffix(m, "último") || strings.Contains(m, "first") {
		t.Errorf("stdout is not the last 4,096 bytes: %d bytes, ends %q", len(m), m[len(m)-10:])
	}
	if *errs.Message != "warning: sh" {
		t.Errorf("stderr: %q", *errs.Message)
	}
	cmds := w.rt.Commands()
	if last := cmds[len(cmds)-1]; last.Shell != arm.ShellSh || len(last.Script) != 1 || last.Script[0] != "cat /var/log/cloud-init-output.log" {
		t.Errorf("the agent was handed %+v", last)
	}
	done(vms.BeginRunCommand(w.ctx, "rc", "win", script("RunPowerShellScript", "hostname"), nil))
	if cmds := w.rt.Commands(); cmds[len(cmds)-1].Shell != arm.ShellPowerShell {
		t.Errorf("a Windows VM's agent runs %s", cmds[len(cmds)-1].Shell)
	}
}

// What Azure refuses: another OS's command, one it does not have, one at a
// time per VM, and a VM that is not running.
func TestRunCommandRefusesWhatAzureRefuses(t *testing.T) {
	release := make(chan struct{})
	w, vms := runCommandWorld(t, func(id string, _ arm.Command) (arm.CommandResult, error) {
		if strings.HasSuffix(id, "/win") {
			<-release
		}
		return arm.CommandResult{Stdout: "ok"}, nil
	})
	_, err := vms.BeginRunCommand(w.ctx, "rc", "win", script("RunShellScript", "ls"), nil)
	if re := azureCode(t, err, "Conflict"); !strings.Contains(err.Error(), "Run command OS type 'Linux' does not match the target OS Windows.") || re.StatusCode != 409 {
		t.Errorf("a Linux command on Windows: %v", err)
	}
	_, err = vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunBatchScript"), nil)
	if re := azureCode(t, err, "NotFound"); re.StatusCode != 404 {
		t.Errorf("an unknown command: %v", err)
	}
	_, err = vms.BeginRunCommand(w.ctx, "rc", "win", script("IPConfig"), nil)
	azureCode(t, err, "OperationNotSupported")

	first, err := vms.BeginRunCommand(w.ctx, "rc", "win", script("RunPowerShellScript", "hostname"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = vms.BeginRunCommand(w.ctx, "rc", "win", script("RunPowerShellScript", "hostname"), nil)
	if re := azureCode(t, err, "Conflict"); !strings.Contains(err.Error(), "Run command extension execution is in progress") || re.StatusCode != 409 {
		t.Errorf("a second run while one runs: %v", err)
	}
	// Another VM's agent is not busy.
	done(vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunShellScript", "hostname"), nil))
	close(release)
	done(first, nil)
	done(vms.BeginRunCommand(w.ctx, "rc", "win", script("RunPowerShellScript", "hostname"), nil))

	done(vms.BeginPowerOff(w.ctx, "rc", "lin", nil))
	_, err = vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunShellScript", "hostname"), nil)
	if re := azureCode(t, err, "OperationNotAllowed"); re.StatusCode != 409 {
		t.Errorf("a stopped VM: %v", err)
	}
}

// An agent that cannot run the script fails the operation as an agent that
// does not report does on Azure.
func TestRunCommandOnAnAgentThatDoesNotAnswer(t *testing.T) {
	w, vms := runCommandWorld(t, func(string, arm.Command) (arm.CommandResult, error) {
		return arm.CommandResult{}, errors.New("machine is not running in this machine runtime")
	})
	err := pollErr(vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunShellScript", "hostname"), nil))
	azureCode(t, err, "VMAgentStatusCommunicationError")
}

// bootOnly is a machine runtime with no VM agent.
type bootOnly struct{ rt *arm.RecordingRuntime }

func (b bootOnly) Boot(ctx context.Context, m arm.Machine) error { return b.rt.Boot(ctx, m) }
func (b bootOnly) Halt(ctx context.Context, id string) error     { return b.rt.Halt(ctx, id) }
func (b bootOnly) Stop(ctx context.Context, id string) error     { return b.rt.Stop(ctx, id) }

// A runtime that runs no VM agent gets a plain refusal, not a made-up
// output.
func TestRunCommandWithoutAGuestAgentSaysSo(t *testing.T) {
	rt := &arm.RecordingRuntime{}
	w := newWorld(t, func(o *arm.Options) { o.Runtime = bootOnly{rt} })
	w.group("rc")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rc", "lin", linuxVM(*w.nic("rc", "lin-nic", w.network("rc")).ID, ""), nil))
	waitRunning(t, rt, 1)
	_, err := vms.BeginRunCommand(w.ctx, "rc", "lin", script("RunShellScript", "hostname"), nil)
	if azureCode(t, err, "OperationNotSupported"); !strings.Contains(err.Error(), "GuestAgent") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	rcs := must(w.compute.NewVirtualMachineRunCommandsClient(), nil)
	_, err = rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "x", armcompute.VirtualMachineRunCommand{Location: to.Ptr(location),
		Properties: &armcompute.VirtualMachineRunCommandProperties{Source: &armcompute.VirtualMachineRunCommandScriptSource{Script: to.Ptr("hostname")}}}, nil)
	azureCode(t, err, "OperationNotSupported")
}

// The scale-set instance form runs on the instance's agent.
func TestRunCommandOnAScaleSetInstance(t *testing.T) {
	w := newWorld(t, nil)
	w.rt.Answer = func(id string, c arm.Command) (arm.CommandResult, error) {
		return arm.CommandResult{Stdout: id + " " + c.Shell}, nil
	}
	w.group("rc")
	ss := scaleSet(w.network("rc"), "win", "", 1)
	done(must(w.compute.NewVirtualMachineScaleSetsClient(), nil).BeginCreateOrUpdate(w.ctx, "rc", "pool", ss, nil))
	waitRunning(t, w.rt, 1)
	insts := must(w.compute.NewVirtualMachineScaleSetVMsClient(), nil)
	res := done(insts.BeginRunCommand(w.ctx, "rc", "pool", "0", script("RunPowerShellScript", "hostname"), nil))
	if m := *res.Value[0].Message; !strings.HasSuffix(m, "/virtualMachineScaleSets/pool/virtualMachines/0 powershell") {
		t.Errorf("the instance's agent answered %q", m)
	}
	_, err := insts.BeginRunCommand(w.ctx, "rc", "pool", "0", script("RunShellScript", "ls"), nil)
	azureCode(t, err, "Conflict")

	rcs := must(w.compute.NewVirtualMachineScaleSetVMRunCommandsClient(), nil)
	done(rcs.BeginCreateOrUpdate(w.ctx, "rc", "pool", "0", "diag", armcompute.VirtualMachineRunCommand{Location: to.Ptr(location),
		Properties: &armcompute.VirtualMachineRunCommandProperties{Source: &armcompute.VirtualMachineRunCommandScriptSource{Script: to.Ptr("hostname")}}}, nil))
	got := must(rcs.Get(w.ctx, "rc", "pool", "0", "diag", &armcompute.VirtualMachineScaleSetVMRunCommandsClientGetOptions{Expand: to.Ptr("instanceView")}))
	if iv := got.Properties.InstanceView; iv == nil || *iv.ExecutionState != armcompute.ExecutionStateSucceeded || !strings.HasSuffix(*iv.Output, "/virtualMachines/0 powershell") {
		t.Errorf("the instance's run command: %+v", got.Properties.InstanceView)
	}
	if *got.Type != "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/runCommands" {
		t.Errorf("type %s", *got.Type)
	}
}
