package arm

import (
	"strings"
	"time"
)

const (
	kindVM       = "Microsoft.Compute/virtualMachines"
	kindDisk     = "Microsoft.Compute/disks"
	kindVMSS     = "Microsoft.Compute/virtualMachineScaleSets"
	kindInstance = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines"

	// Azure's limit on custom data: 64 KiB once decoded.
	maxCustomData    = 64 * 1024
	windowsNameChars = "`~!@#$%^&*()=+_[]{}\\|;:.'\",<>/?"
)

func init() {
	register(&kindInfo{typ: kindVM, topLevel: true, keepsUnsent: true, put: putVM, delay: bootDelay, ready: vmReady, deleted: vmDeleted, instanceView: (*Server).instanceView})
	register(&kindInfo{typ: kindDisk, topLevel: true, put: putDisk, canDelete: diskAttached})
	register(&kindInfo{typ: kindVMSS, topLevel: true, put: putVMSS, delay: bootDelay, ready: vmssReady, deleted: func(s *Server, r *resource) []string { s.dropIdentity(r); return nil }})
	register(&kindInfo{typ: kindInstance, readOnly: true, canDelete: instanceDeleting, instanceView: (*Server).instanceView})
}

// osOf is a VM's OS as its PUT settled it from the image's metadata
// (checkProfile records it as the OS disk's osType).
func osOf(storage map[string]any) string {
	if strings.EqualFold(str(storage, "osDisk", "osType"), "Windows") {
		return "Windows"
	}
	return "Linux"
}

func bootDelay(s *Server, r *resource) time.Duration {
	storage := r.props()["storageProfile"]
	if r.kind.typ == kindVMSS {
		storage = get(r.props(), "virtualMachineProfile", "storageProfile")
	}
	sm, _ := storage.(map[string]any)
	if osOf(sm) == "Windows" {
		return s.opts.BootDelayWindows
	}
	return s.opts.BootDelayLinux
}
