package arm

import (
	"context"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Run Command's action form, POST .../virtualMachines/{vm}/runCommand and
// .../virtualMachineScaleSets/{ss}/virtualMachines/{id}/runCommand: the VM
// agent runs a script and the operation's result is RunCommandResult, the
// output and error streams as instance-view statuses
// (azure-rest-api-specs ComputeRP/stable/2025-04-01/examples/
// runCommandExamples/VirtualMachineRunCommand.json @f2a212d2;
// final-state-via location in armcompute v7.3.0 virtualmachines_client.go).
//
// What Azure refuses and how, where no specification says it:
//   - an unknown command: 404 NotFound "The entity was not found in this
//     Azure location." (MicrosoftDocs/azure-compute-docs
//     articles/virtual-machines/windows/run-command.md @d415f173;
//     Azure/azure-powershell#7331);
//   - another OS's command: 409 Conflict "Run command OS type 'Windows'
//     does not match the target OS Linux." (MicrosoftDocs/azure-docs#116419,
//     Azure/repair-script-library#48);
//   - a second run while one runs ("One script at a time can run", the
//     same page): 409 Conflict "Run command extension execution is in
//     progress. Please wait for completion before invoking a run command."
//     (Azure/azure-cli#19137, MicrosoftDocs/azure-docs#43356);
//   - a VM that is not running: Run Command is delivered as a VM extension
//     (Azure/azure-cli#4286, the maintainer's comment), and extensions of a
//     stopped VM are refused with 409 OperationNotAllowed "Cannot modify
//     extensions in the VM when the VM is not running."
//     (hashicorp/terraform-provider-azurerm#477);
//   - an agent that does not answer: the operation fails with
//     VMAgentStatusCommunicationError (learn.microsoft.com/azure/
//     virtual-machines/error-codes).

// The command IDs Azure offers per OS (run-command.md for Windows @d415f173
// and Linux @1a043fb3 in MicrosoftDocs/azure-compute-docs). Only the
// script commands carry a script the emulator can hand to the agent.
var (
	windowsCommands = []string{"RunPowerShellScript", "DisableNLA", "DisableWindowsUpdate", "EnableAdminAccount", "EnableEMS",
		"EnableRemotePS", "EnableWindowsUpdate", "IMDSCertCheck", "IPConfig", "RDPSettings", "ResetRDPCert", "SetRDPPort",
		"WindowsActivationValidation", "WindowsGhostedNicValidationScript", "WindowsUpgradeAssessmentValidation",
		"RemoveRunCommandWindowsExtension"}
	linuxCommands = []string{"RunShellScript", "ifconfig", "RemoveRunCommandLinuxExtension"}
)

// maxRunCommandOutput is how much of each stream Azure returns: "Output is
// limited to the last 4,096 bytes." (run-command.md, both OSes; and "limited
// to last 4KB" for managed run commands' instance view, run-command-managed.md
// @06c2de23).
const maxRunCommandOutput = 4096

// commandOS is the OS a command ID belongs to, "" for none.
func commandOS(commandID string) string {
	for os, ids := range map[string][]string{"Windows": windowsCommands, "Linux": linuxCommands} {
		for _, c := range ids {
			if strings.EqualFold(c, commandID) {
				return os
			}
		}
	}
	return ""
}

// scriptCommand is the command ID that runs a user's script on os.
func scriptCommand(os string) string {
	if os == "Windows" {
		return "RunPowerShellScript"
	}
	return "RunShellScript"
}

func shellOf(os string) string {
	if os == "Windows" {
		return ShellPowerShell
	}
	return ShellSh
}

// machineOS is a VM's or instance's OS as its PUT settled it.
func machineOS(r *resource) string { return osOf(obj(r.props(), "storageProfile")) }

// checkCommand refuses a command ID that Azure does not have, or has for
// the other OS, and one whose script the emulator does not carry.
func checkCommand(r *resource, commandID string) *armError {
	os := machineOS(r)
	switch owner := commandOS(commandID); {
	case owner == "":
		return errorf(http.StatusNotFound, "NotFound", "The entity was not found in this Azure location.")
	case owner != os:
		return errorf(http.StatusConflict, "Conflict", "Run command OS type '%s' does not match the target OS %s.", owner, os)
	case !strings.EqualFold(commandID, scriptCommand(os)):
		return errorf(http.StatusBadRequest, "OperationNotSupported",
			"The emulator does not carry the script of the built-in command '%s': run your own with %s.", commandID, scriptCommand(os))
	}
	return nil
}

// agentRefusal is Azure's answer to a run command on a machine whose agent
// cannot take one: still being created or deleted, or not running. The
// emulator adds its own when its runtime runs no VM agent.
func (s *Server) agentRefusal(r *resource) *armError {
	if e := powerRefused(r, "runCommand"); e != nil {
		return e
	}
	if switchedOff(r) {
		return errorf(http.StatusConflict, "OperationNotAllowed", "Cannot modify extensions in the VM when the VM is not running.")
	}
	if _, ok := s.opts.Runtime.(GuestAgent); !ok {
		return errorf(http.StatusBadRequest, "OperationNotSupported",
			"The emulator's machine runtime runs no VM agent, so it cannot run commands on %s: the runtime does not implement arm.GuestAgent.", r.id.Name())
	}
	return nil
}

// serveRunCommand starts an action run command on a VM or instance.
func (s *Server) serveRunCommand(w http.ResponseWriter, r *http.Request, id resourceID, res *resource, body map[string]any) {
	unlock := func() {}
	defer func() { unlock() }()
	commandID := str(body, "commandId")
	if commandID == "" {
		writeError(w, invalidParameter("commandId", "Required parameter 'commandId' is missing (null)."))
		return
	}
	var script []string
	for _, l := range list(body, "script") {
		if line, ok := l.(string); ok {
			script = append(script, line)
		}
	}
	unlock = s.lock()
	if e := s.agentRefusal(res); e != nil {
		unlock()
		writeError(w, e)
		return
	}
	if e := checkCommand(res, commandID); e != nil {
		unlock()
		writeError(w, e)
		return
	}
	machine := key(res.idStr)
	if s.agentBusy[machine] {
		unlock()
		writeError(w, errorf(http.StatusConflict, "Conflict", "Run command extension execution is in progress. Please wait for completion before invoking a run command."))
		return
	}
	s.agentBusy[machine] = true
	op := s.startOperation(w, r, id.Subscription, id.Namespace, str(res.body, "location"))
	c := Command{Shell: shellOf(machineOS(res)), Script: script, Parameters: parameters(body)}
	s.after(s.opts.OperationDelay, func() {
		out, e := s.runOnAgent(res, c, 0)
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.agentBusy, machine)
		if e == nil {
			op.result = map[string]any{"value": []any{
				streamStatus("StdOut", out.Stdout), streamStatus("StdErr", out.Stderr),
			}}
		}
		s.finishOperation(op, e)
	})
	unlock()
	w.WriteHeader(http.StatusAccepted)
}

// parameters are a body's name/value pairs, in order.
func parameters(m map[string]any) [][2]string {
	var out [][2]string
	for _, p := range list(m, "parameters") {
		pm, _ := p.(map[string]any)
		out = append(out, [2]string{str(pm, "name"), str(pm, "value")})
	}
	return out
}

// streamStatus is one stream of a RunCommandResult. Azure reports both as
// succeeded whatever the script's exit code: the action form reports no
// exit code at all.
func streamStatus(stream, text string) map[string]any {
	return map[string]any{
		"code": "ComponentStatus/" + stream + "/succeeded", "level": "Info",
		"displayStatus": "Provisioning succeeded", "message": lastBytes(text, maxRunCommandOutput),
	}
}

// lastBytes is the end of s, at most n bytes, starting on a whole
// character: a cut inside a UTF-8 sequence would make the JSON's string
// invalid.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// runOnAgent hands a script to the machine's VM agent, without the
// server's lock, and waits for it; timeout 0 is Azure's 90 minutes
// ("The maximum time a script can run is 90 minutes", run-command.md).
func (s *Server) runOnAgent(r *resource, c Command, timeout time.Duration) (CommandResult, *armError) {
	agent, ok := s.opts.Runtime.(GuestAgent)
	if !ok {
		return CommandResult{}, errorf(http.StatusBadRequest, "OperationNotSupported", "The emulator's machine runtime runs no VM agent.")
	}
	if timeout <= 0 {
		timeout = 90 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := agent.RunCommand(ctx, r.idStr, c)
	if ctx.Err() == context.DeadlineExceeded {
		return out, errorf(http.StatusConflict, "TimedOut", "The script did not finish within %s.", timeout)
	}
	if err != nil {
		return out, errorf(http.StatusConflict, "VMAgentStatusCommunicationError",
			"VM '%s' has not reported status for VM agent or extensions. Verify that the OS is up and healthy, the VM has a running VM agent, and that it can establish outbound connections to Azure storage. (%v)", r.id.Name(), err)
	}
	return out, nil
}
