package arm

import (
	"net/http"
	"strings"
	"time"
)

// Managed run commands: the runCommands child resource of a VM or a
// scale-set instance (VirtualMachineRunCommand in the Compute REST spec;
// armcompute v7.3.0 VirtualMachineRunCommandsClient and
// VirtualMachineScaleSetVMRunCommandsClient). A PUT runs the script; the
// run's state is the instance view ($expand=instanceView): executionState
// Pending, then Running, then Succeeded, Failed or TimedOut, with the exit
// code, the last 4 KB of each stream, and the start and end times
// (run-command-managed.md @06c2de23 in MicrosoftDocs/azure-compute-docs).
// provisioningState says whether the extension platform ran the script,
// not how the script did, unless treatFailureAsDeploymentFailure is set
// (the SDK's VirtualMachineRunCommandProperties; Azure/bicep#10608). With
// asyncExecution the PUT completes once the script has started.
// Unlike the action form, several may run at once on one machine ("Parallel
// execution of multiple scripts", the same page).

const (
	kindVMRunCommand       = "Microsoft.Compute/virtualMachines/runCommands"
	kindInstanceRunCommand = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/runCommands"
)

func init() {
	for _, typ := range []string{kindVMRunCommand, kindInstanceRunCommand} {
		register(&kindInfo{typ: typ, topLevel: true, put: putRunCommand, work: runManagedCommand, ready: runCommandReady,
			instanceView: func(_ *Server, r *resource) map[string]any { return deepCopy(obj(r.secrets, "instanceView")) }})
	}
}

// putRunCommand checks a run command against its machine and what the
// emulator can do, and keeps what Azure never returns apart.
func putRunCommand(s *Server, r, _ *resource) *armError {
	parent, _ := r.id.Parent()
	machine := s.lookup(parent.String())
	if e := s.agentRefusal(machine); e != nil {
		return e
	}
	p := r.props()
	src := obj(p, "source")
	script, commandID := str(src, "script"), str(src, "commandId")
	switch {
	case commandID != "" && script != "":
		// Azure/azure-rest-api-specs#20819.
		return errorf(http.StatusBadRequest, "InvalidParameterConflictingProperties", "The property 'source.commandId' cannot be used together with property 'source.script'.")
	case commandID != "":
		if e := checkCommand(machine, commandID); e != nil {
			return e
		}
	case str(src, "scriptUri") != "" || str(src, "galleryScriptReferenceId") != "":
		return errorf(http.StatusBadRequest, "OperationNotSupported", "The emulator runs scripts given in source.script only: it downloads nothing (scriptUri, galleryScriptReferenceId).")
	case script == "":
		return invalidParameter("source", "A run command needs a source: source.script or source.commandId.")
	}
	for _, f := range []string{"outputBlobUri", "errorBlobUri", "runAsUser"} {
		if str(p, f) != "" {
			return errorf(http.StatusBadRequest, "OperationNotSupported",
				"The emulator does not support %s: its scripts run as the VM agent's own user, and their streams are in the instance view.", f)
		}
	}
	// Write-only: Azure never returns them (the specification marks them
	// x-ms-secret).
	for _, f := range []string{"protectedParameters", "runAsPassword"} {
		if v, ok := p[f]; ok {
			r.secrets[f] = v
			delete(p, f)
		}
	}
	r.secrets["instanceView"] = map[string]any{"executionState": "Pending"}
	delete(r.secrets, "provisioningError")
	return nil
}

// runManagedCommand runs the script on the machine's agent: to its end, or
// only its start with asyncExecution.
func runManagedCommand(s *Server, r *resource) {
	unlock := func() {}
	defer func() { unlock() }()
	unlock = s.lock()
	parent, _ := r.id.Parent()
	machine := s.lookup(parent.String())
	if machine == nil || s.lookup(r.idStr) != r {
		unlock()
		return
	}
	p := r.props()
	c := Command{Shell: shellOf(machineOS(machine)), Parameters: parameters(p)}
	if script := str(p, "source", "script"); script != "" {
		c.Script = strings.Split(strings.ReplaceAll(script, "\r\n", "\n"), "\n")
	}
	for _, pp := range list(r.secrets, "protectedParameters") {
		pm, _ := pp.(map[string]any)
		c.Parameters = append(c.Parameters, [2]string{str(pm, "name"), str(pm, "value")})
	}
	timeout := time.Duration(0)
	if t, ok := p["timeoutInSeconds"].(float64); ok && t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	async, _ := p["asyncExecution"].(bool)
	r.secrets["instanceView"] = map[string]any{"executionState": "Running", "startTime": s.now().UTC().Format(time.RFC3339Nano)}
	r.touch()
	unlock()
	run := func() {
		out, e := s.runOnAgent(machine, c, timeout)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.lookup(r.idStr) != r {
			return // deleted or replaced meanwhile
		}
		view := obj(r.secrets, "instanceView")
		view["endTime"] = s.now().UTC().Format(time.RFC3339Nano)
		switch {
		case e != nil && e.Code == "TimedOut":
			view["executionState"], view["executionMessage"] = "TimedOut", e.Message
		case e != nil:
			view["executionState"], view["executionMessage"] = "Failed", e.Message
			r.secrets["provisioningError"] = map[string]any{"code": e.Code, "message": e.Message}
		default:
			view["executionState"] = "Succeeded"
			if out.ExitCode != 0 {
				view["executionState"] = "Failed"
			}
			view["exitCode"] = float64(out.ExitCode)
			view["output"] = lastBytes(out.Stdout, maxRunCommandOutput)
			view["error"] = lastBytes(out.Stderr, maxRunCommandOutput)
		}
		r.touch()
	}
	if async {
		go func() { run(); s.changed() }()
		return
	}
	run()
}

// runCommandReady settles the PUT: failed when the agent could not run the
// script, or when the script failed and the user asked for that to fail
// the deployment (VMExtensionProvisioningError, as Azure reports a failed
// extension: Azure/custom-script-extension-linux#107).
func runCommandReady(_ *Server, r *resource) ([]Machine, *armError) {
	if pe, ok := r.secrets["provisioningError"].(map[string]any); ok {
		return nil, errorf(http.StatusConflict, str(pe, "code"), "%s", str(pe, "message"))
	}
	state := str(r.secrets, "instanceView", "executionState")
	if strict, _ := r.props()["treatFailureAsDeploymentFailure"].(bool); strict && (state == "Failed" || state == "TimedOut") {
		return nil, errorf(http.StatusConflict, "VMExtensionProvisioningError",
			"VM has reported a failure when processing run command '%s': execution %s with exit code %v. Its output and error are in the run command's instance view.",
			r.id.Name(), strings.ToLower(state), get(r.secrets, "instanceView", "exitCode"))
	}
	return nil, nil
}
