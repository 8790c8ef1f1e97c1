package arm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

func managed(script string, set func(*armcompute.VirtualMachineRunCommandProperties)) armcompute.VirtualMachineRunCommand {
	p := &armcompute.VirtualMachineRunCommandProperties{Source: &armcompute.VirtualMachineRunCommandScriptSource{Script: to.Ptr(script)}}
	if set != nil {
		set(p)
	}
	return armcompute.VirtualMachineRunCommand{Location: to.Ptr(location), Properties: p}
}

var withInstanceView = &armcompute.VirtualMachineRunCommandsClientGetByVirtualMachineOptions{Expand: to.Ptr("instanceView")}

// A managed run command's instance view has the script's exit code and
// streams; its provisioning state says only that it ran, unless a failure
// is to fail the deployment.
func TestManagedRunCommandsReportTheScriptsOutcome(t *testing.T) {
	hold := make(chan struct{})
	w, _ := runCommandWorld(t, func(_ string, c arm.Command) (arm.CommandResult, error) {
		switch s := strings.Join(c.Script, "\n"); {
		case strings.Contains(s, "wait"):
			<-hold
		case strings.Contains(s, "fail"):
			return arm.CommandResult{Stdout: "partial", Stderr: "kubeadm join failed", ExitCode: 3}, nil
		}
		return arm.CommandResult{Stdout: strings.Repeat("y", 5000) + "tail"}, nil
	})
	rcs := must(w.compute.NewVirtualMachineRunCommandsClient(), nil)

	created := done(rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "ok", managed("hostname\ncat /etc/hostname", func(p *armcompute.VirtualMachineRunCommandProperties) {
		p.ProtectedParameters = []*armcompute.RunCommandInputParameter{{Name: to.Ptr("token"), Value: to.Ptr("s3cret")}}
	}), nil))
	if *created.Properties.ProvisioningState != "Succeeded" || created.Properties.ProtectedParameters != nil {
		t.Errorf("created: %s, protected parameters returned: %v", *created.Properties.ProvisioningState, created.Properties.ProtectedParameters)
	}
	cmds := w.rt.Commands()
	if last := cmds[len(cmds)-1]; len(last.Script) != 2 || len(last.Parameters) != 1 || last.Parameters[0] != [2]string{"token", "s3cret"} {
		t.Errorf("the agent was handed %+v", last)
	}
	iv := must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "ok", withInstanceView)).Properties.InstanceView
	if iv == nil || *iv.ExecutionState != armcompute.ExecutionStateSucceeded || *iv.ExitCode != 0 || len(*iv.Output) != 4096 || !strings.HasSuffix(*iv.Output, "tail") ||
		iv.StartTime == nil || iv.EndTime == nil || iv.EndTime.Before(*iv.StartTime) {
		t.Errorf("a script that succeeded: %+v", iv)
	}
	if plain := must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "ok", nil)); plain.Properties.InstanceView != nil {
		t.Errorf("the instance view without $expand")
	}

	failed := done(rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "bad", managed("fail", nil), nil))
	iv = must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "bad", withInstanceView)).Properties.InstanceView
	if *failed.Properties.ProvisioningState != "Succeeded" || *iv.ExecutionState != armcompute.ExecutionStateFailed || *iv.ExitCode != 3 || *iv.Error != "kubeadm join failed" || *iv.Output != "partial" {
		t.Errorf("a script that failed: provisioning %s, %+v", *failed.Properties.ProvisioningState, iv)
	}

	err := pollErr(rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "strict", managed("fail", func(p *armcompute.VirtualMachineRunCommandProperties) {
		p.TreatFailureAsDeploymentFailure = to.Ptr(true)
	}), nil))
	azureCode(t, err, "VMExtensionProvisioningError")
	if s := must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "strict", nil)); *s.Properties.ProvisioningState != "Failed" {
		t.Errorf("a failure that fails the deployment: %s", *s.Properties.ProvisioningState)
	}

	// asyncExecution: provisioned once the script started.
	done(rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "async", managed("wait", func(p *armcompute.VirtualMachineRunCommandProperties) {
		p.AsyncExecution = to.Ptr(true)
	}), nil))
	if iv := must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "async", withInstanceView)).Properties.InstanceView; *iv.ExecutionState != armcompute.ExecutionStateRunning || iv.EndTime != nil {
		t.Errorf("an asynchronous script still running: %+v", iv)
	}
	close(hold)
	poll.Until(t, 10*time.Second, func() string {
		if s := *must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "async", withInstanceView)).Properties.InstanceView.ExecutionState; s != armcompute.ExecutionStateSucceeded {
			return "the asynchronous script is " + string(s)
		}
		return ""
	})

	var listed int
	for p := rcs.NewListByVirtualMachinePager("rc", "lin", &armcompute.VirtualMachineRunCommandsClientListByVirtualMachineOptions{Expand: to.Ptr("instanceView")}); p.More(); {
		for _, rc := range must(p.NextPage(w.ctx)).Value {
			if rc.Properties.InstanceView == nil {
				t.Errorf("%s listed without its instance view", *rc.Name)
			}
			listed++
		}
	}
	if listed != 4 {
		t.Errorf("%d run commands listed, want 4", listed)
	}
	done(rcs.BeginDelete(w.ctx, "rc", "lin", "ok", nil))
	_, err = rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "ok", nil)
	azureCode(t, err, "ResourceNotFound")
}

// A script that outlives timeoutInSeconds is stopped and reported TimedOut.
func TestManagedRunCommandTimesOut(t *testing.T) {
	t.Parallel() // it waits out a script that outlives its timeout, alone in its world
	// The recording agent sees no deadline: it outlives the second given.
	w, _ := runCommandWorld(t, func(_ string, _ arm.Command) (arm.CommandResult, error) {
		time.Sleep(1500 * time.Millisecond)
		return arm.CommandResult{ExitCode: 1}, nil
	})
	rcs := must(w.compute.NewVirtualMachineRunCommandsClient(), nil)
	done(rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "slow", managed("sleep", func(p *armcompute.VirtualMachineRunCommandProperties) {
		p.TimeoutInSeconds = to.Ptr[int32](1)
	}), nil))
	if iv := must(rcs.GetByVirtualMachine(w.ctx, "rc", "lin", "slow", withInstanceView)).Properties.InstanceView; *iv.ExecutionState != armcompute.ExecutionStateTimedOut {
		t.Errorf("a script past its timeout: %+v", iv)
	}
}

// The refusals of a run command's PUT: both a command ID and a script
// (Azure/azure-rest-api-specs#20819), another OS's command, a stopped VM.
func TestManagedRunCommandRefusals(t *testing.T) {
	w, vms := runCommandWorld(t, nil)
	rcs := must(w.compute.NewVirtualMachineRunCommandsClient(), nil)
	both := managed("hostname", func(p *armcompute.VirtualMachineRunCommandProperties) { p.Source.CommandID = to.Ptr("RunShellScript") })
	_, err := rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "x", both, nil)
	azureCode(t, err, "InvalidParameterConflictingProperties")
	other := armcompute.VirtualMachineRunCommand{Location: to.Ptr(location), Properties: &armcompute.VirtualMachineRunCommandProperties{
		Source: &armcompute.VirtualMachineRunCommandScriptSource{CommandID: to.Ptr("RunPowerShellScript")}}}
	_, err = rcs.BeginCreateOrUpdate(w.ctx, "rc", "lin", "x", other, nil)
	azureCode(t, err, "Conflict")
	done(vms.BeginDeallocate(w.ctx, "rc", "win", nil))
	_, err = rcs.BeginCreateOrUpdate(w.ctx, "rc", "win", "x", managed("hostname", nil), nil)
	azureCode(t, err, "OperationNotAllowed")
}
