package machines

import (
	"testing"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

// A kubelet exits on a flag its release removed, such as
// --pod-infra-container-image from 1.35 (the one PrepareNode.ps1 once
// passed); an older kubelet takes it.
func TestRemovedKubeletFlags(t *testing.T) {
	reg := bootdata.NodeRegistration{KubeletExtraArgs: bootdata.Args{{Name: "pod-infra-container-image", Value: "registry.k8s.io/pause:3.10"}, {Name: "windows-priorityclass", Value: "ABOVE_NORMAL_PRIORITY_CLASS"}}}
	for v, want := range map[string]string{"v1.34.2": "", "v1.35.0": "--pod-infra-container-image", "v1.36.3": "--pod-infra-container-image"} {
		if got := unknownKubeletFlag(reg, v); got != want {
			t.Errorf("kubelet %s: unknown flag %q, want %q", v, got, want)
		}
	}
}
