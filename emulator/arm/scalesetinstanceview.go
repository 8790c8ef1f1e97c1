package arm

import (
	"sort"
	"strings"
	"time"
)

// scaleSetInstanceView is VirtualMachineScaleSets_GetInstanceView's answer
// (VirtualMachineScaleSetInstanceView in the Compute specification): the
// scale set's own provisioning status, how many of its instances are in
// each provisioning and power state, its extensions (none: the emulator
// runs none) and its orchestration services. A scale set without an
// automatic repairs policy lists that service as not running, as the
// specification's example answers
// (virtualMachineScaleSetExamples/VirtualMachineScaleSet_GetInstanceView_
// MaximumSet_Gen.json).
func (s *Server) scaleSetInstanceView(vmss *resource) map[string]any {
	state := strings.ToLower(vmss.provisioningState())
	if vmss.deleting {
		state = "deleting"
	}
	level := "Info"
	if state == "failed" {
		level = "Error"
	}
	counts := map[string]int{}
	for _, inst := range s.liveInstances(vmss) {
		for _, st := range list(s.instanceView(inst), "statuses") {
			counts[str(st.(map[string]any), "code")]++
		}
	}
	codes := make([]string, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	summary := make([]any, 0, len(codes))
	for _, c := range codes {
		summary = append(summary, map[string]any{"code": c, "count": counts[c]})
	}
	repairs := "NotRunning"
	if get(vmss.props(), "automaticRepairsPolicy", "enabled") == true {
		repairs = "Running"
	}
	return map[string]any{
		"virtualMachine": map[string]any{"statusesSummary": summary},
		"extensions":     []any{},
		"statuses": []any{map[string]any{"code": "ProvisioningState/" + state, "level": level, "displayStatus": "Provisioning " + state,
			"time": s.now().UTC().Format(time.RFC3339Nano)}},
		"orchestrationServices": []any{map[string]any{"serviceName": "AutomaticRepairs", "serviceState": repairs}},
	}
}
