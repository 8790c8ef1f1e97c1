package arm

import (
	"net/http"
)

// Managed disks: a disk attached to a VM cannot be deleted. Azure answers
// 409 OperationNotAllowed "Disk <name> is attached to VM <VM ID>.", as
// Microsoft's AKS troubleshooting page (its localized copies in the
// azure-docs repositories) quotes DisksClient#Delete.

func diskAttached(s *Server, r *resource) *armError {
	if vm := str(r.body, "managedBy"); vm != "" && s.lookup(vm) != nil {
		return errorf(http.StatusConflict, "OperationNotAllowed", "Disk %s is attached to VM %s.", r.id.Name(), vm)
	}
	return nil
}
