package arm

// vmDefaults fills in what Compute returns for a VM whose PUT left it out:
// the empty lists of certificates (osProfile.secrets) and data disks, and
// the security type of a VM that is neither Trusted Launch nor
// confidential. The Compute specification's examples answer so
// (ComputeRP/stable/2025-11-01/examples/virtualMachineExamples/
// VirtualMachine_Create_WithSshAuthentication.json @d1ff18c0), and a client
// that reads them finds them.
func vmDefaults(p map[string]any) {
	if _, ok := obj(p, "osProfile")["secrets"]; !ok {
		obj(p, "osProfile")["secrets"] = []any{}
	}
	if _, ok := obj(p, "storageProfile")["dataDisks"]; !ok {
		obj(p, "storageProfile")["dataDisks"] = []any{}
	}
	if str(p, "securityProfile", "securityType") == "" {
		obj(p, "securityProfile")["securityType"] = "Standard"
	}
}
