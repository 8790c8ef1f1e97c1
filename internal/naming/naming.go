// Package naming turns Kubernetes object names into Azure VM names and
// computer names. Windows keeps NetBIOS's 15-character computer-name limit,
// and a scale set appends six characters to its prefix, so Windows names are
// shortened by fixed rules; two objects that shorten to one name are a
// conflict that must be refused before Azure sees it.
package naming

import (
	"fmt"
	"strings"
)

const (
	// MaxWindowsComputerName is Windows' (NetBIOS) computer-name limit.
	MaxWindowsComputerName = 15
	// MaxWindowsScaleSetPrefix leaves room for the six characters a scale
	// set appends to each instance's computer name.
	MaxWindowsScaleSetPrefix = 9
	// MaxLinuxComputerName is Azure's limit for Linux computer names.
	MaxLinuxComputerName = 64
	// MaxVMName is Azure's limit for a VM resource name.
	MaxVMName = 64
	// MaxLinuxScaleSetPrefix leaves room for the appended instance suffix.
	MaxLinuxScaleSetPrefix = 58

	windowsHead  = 9
	windowsTail  = 5
	windowsPool  = "win-"
	invalidChars = `~!@#$%^&*()=+_[]{}\|;:.'",<>/? `
)

// WindowsMachineName is the VM and computer name of a Windows AzureMachine:
// the name itself when it fits in 15 characters, otherwise its first nine
// characters (a trailing '-' dropped) and its last five joined by '-'.
// Characters Windows refuses in a computer name (the '.' of a DNS subdomain)
// become '-'.
func WindowsMachineName(name string) string {
	name = sanitize(name)
	if len(name) <= MaxWindowsComputerName {
		return name
	}
	head := strings.TrimRight(name[:windowsHead], "-")
	return head + "-" + name[len(name)-windowsTail:]
}

// WindowsScaleSetPrefix is the computer-name prefix of a Windows scale set:
// the pool name when it fits in nine characters, otherwise "win-" and the
// pool name's last five.
func WindowsScaleSetPrefix(poolName string) string {
	poolName = sanitize(poolName)
	if len(poolName) <= MaxWindowsScaleSetPrefix {
		return poolName
	}
	return windowsPool + poolName[len(poolName)-windowsTail:]
}

// LinuxName checks a Linux VM or computer name against Azure's limit; Linux
// names are never shortened, since nothing on Linux needs them short.
func LinuxName(name string) (string, error) {
	if len(name) > MaxLinuxComputerName {
		return "", fmt.Errorf("name %q is %d characters long; Azure allows at most %d for a Linux VM: choose a shorter name", name, len(name), MaxLinuxComputerName)
	}
	return name, nil
}

// ValidateWindowsComputerName reports why Windows would refuse a computer name.
func ValidateWindowsComputerName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a Windows computer name cannot be empty")
	case len(name) > MaxWindowsComputerName:
		return fmt.Errorf("Windows computer name %q is %d characters long; at most %d are allowed", name, len(name), MaxWindowsComputerName)
	case strings.ContainsAny(name, invalidChars):
		return fmt.Errorf("Windows computer name %q contains a character Windows refuses (one of %s)", name, invalidChars)
	case strings.Trim(name, "0123456789") == "":
		return fmt.Errorf("Windows computer name %q is only digits, which Windows refuses: add a letter", name)
	case strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-"):
		return fmt.Errorf("Windows computer name %q starts or ends with '-'", name)
	}
	return nil
}

func sanitize(name string) string {
	if !strings.ContainsAny(name, invalidChars) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if strings.IndexByte(invalidChars, c) >= 0 {
			b[i] = '-'
		}
	}
	return string(b)
}

// Claim is one object's claim on an Azure name within a cluster.
type Claim struct {
	// Object names the Kubernetes object, as "Kind namespace/name".
	Object string
	// Name is the Azure name (or scale-set prefix) it would get.
	Name string
}

// ConflictError says that two objects would get the same Azure name.
type ConflictError struct {
	Name     string
	New      string
	Existing string
	Prefix   bool
}

func (e *ConflictError) Error() string {
	what := "Windows computer name"
	if e.Prefix {
		what = "Windows scale-set computer-name prefix"
	}
	return fmt.Sprintf("%s would get the %s %q, which %s already has (Windows keeps only the first 9 and last 5 characters of a long machine name, and \"win-\" plus the last 5 of a long pool name): rename one so that they differ there",
		e.New, what, e.Name, e.Existing)
}

// FindConflict returns the first existing claim whose name equals the new
// claim's, as a *ConflictError, or nil. Claims by the same object are not
// conflicts (an update re-checks the object against itself).
func FindConflict(newClaim Claim, existing []Claim, prefix bool) error {
	for _, c := range existing {
		if c.Object != newClaim.Object && strings.EqualFold(c.Name, newClaim.Name) {
			return &ConflictError{Name: newClaim.Name, New: newClaim.Object, Existing: c.Object, Prefix: prefix}
		}
	}
	return nil
}

// VMName is the Azure VM (and computer) name of a machine: shortened by the
// Windows rules for Windows, the object's name for Linux.
func VMName(name string, windows bool) string {
	if windows {
		return WindowsMachineName(name)
	}
	return name
}

// ClusterNameProblem says why a cluster name cannot be a winkube cluster's
// on Azure, or "" when it can. The API server's public IP gets the DNS label
// <name>-<hash>, and Azure refuses a label that does not start with a
// letter (InvalidDomainNameLabel: it must match
// ^[a-z][a-z0-9-]{1,61}[a-z0-9]$).
func ClusterNameProblem(name string) string {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return "must start with a lower-case letter: the API server's public IP takes the DNS label <name>-<hash>, and Azure's DNS labels start with a letter"
	}
	return ""
}
