package arm

import (
	"net/http"
)

// Managed disks: a disk attached to a VM cannot be deleted.

func diskAttached(s *Server, r *resource) *armError {
	if vm := str(r.body, "managedBy"); vm != "" && s.lookup(vm) != nil {
		return errorf(http.StatusConflict, "OperationNotAllowed", "Disk %s is attached to VM %s.", r.id.Name(), vm)
	}
	return nil
}
