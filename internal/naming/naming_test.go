package naming

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestWindowsMachineName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"win-12345", "win-12345"},
		{"abcdefghijklmno", "abcdefghijklmno"}, // exactly 15 passes through
		{"abcdefghijklmnop", "abcdefghi-lmnop"},
		// The seeds' case: a MachineDeployment's generated name.
		{"my-windows-cluster-md-win-7xk2p", "my-window-7xk2p"},
		// A '-' at the ninth character is dropped rather than doubled.
		{"cluster1-md-0-win-z9x8y", "cluster1-z9x8y"},
		// Dots of a DNS subdomain are not allowed in a computer name.
		{"win.pool.example.com", "win-pool-e-com"},
	} {
		got := WindowsMachineName(tc.in)
		if got != tc.want {
			t.Errorf("WindowsMachineName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if err := ValidateWindowsComputerName(got); err != nil {
			t.Errorf("WindowsMachineName(%q) = %q is not a valid computer name: %v", tc.in, got, err)
		}
	}
}

func TestWindowsScaleSetPrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"win-pool", "win-pool"},
		{"winpool01", "winpool01"}, // exactly 9 passes through
		{"windows-pool-1", "win-ool-1"},
		{"capz-cluster-mp-win", "win-p-win"},
		{"machinepool-12345", "win-12345"},
	} {
		if got := WindowsScaleSetPrefix(tc.in); got != tc.want {
			t.Errorf("WindowsScaleSetPrefix(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLinuxNamesPassThroughUpToAzuresLimit(t *testing.T) {
	long := strings.Repeat("a", 64)
	if got, err := LinuxName(long); err != nil || got != long {
		t.Fatalf("LinuxName(64 chars) = %q, %v; want it unchanged", got, err)
	}
	if _, err := LinuxName(long + "b"); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("LinuxName(65 chars) error = %v, want the 64-character limit named", err)
	}
}

func TestValidateWindowsComputerName(t *testing.T) {
	for _, bad := range []string{"", "1234567", "a.b", "abcdefghijklmnop", "-abc", "abc-", "a b"} {
		if err := ValidateWindowsComputerName(bad); err == nil {
			t.Errorf("ValidateWindowsComputerName(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"win-12345", "a", "my-window-7xk2p", "123a"} {
		if err := ValidateWindowsComputerName(good); err != nil {
			t.Errorf("ValidateWindowsComputerName(%q) = %v", good, err)
		}
	}
}

func TestFindConflictNamesBothObjects(t *testing.T) {
	existing := []Claim{
		{Object: "AzureMachine default/cluster-a-md-win-abcde", Name: WindowsMachineName("cluster-a-md-win-abcde")},
	}
	// Shares its first nine and last five characters with the existing one.
	newClaim := Claim{Object: "AzureMachine default/cluster-a-md-linux-abcde", Name: WindowsMachineName("cluster-a-md-linux-abcde")}
	err := FindConflict(newClaim, existing, false)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("FindConflict = %v, want a ConflictError", err)
	}
	for _, want := range []string{"cluster-a-md-win-abcde", "cluster-a-md-linux-abcde", "cluster-a-abcde"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict message %q does not name %q", err, want)
		}
	}
	// An object does not conflict with itself (updates re-check).
	if err := FindConflict(existing[0], existing, false); err != nil {
		t.Fatalf("an object conflicted with itself: %v", err)
	}
	other := Claim{Object: "AzureMachine default/cluster-a-md-win-zzzzz", Name: WindowsMachineName("cluster-a-md-win-zzzzz")}
	if err := FindConflict(other, existing, false); err != nil {
		t.Fatalf("different last five characters conflicted: %v", err)
	}
}

// FuzzWindowsName checks the Windows rules over any name Kubernetes accepts:
// the length limits, determinism, and that only characters Windows allows
// in a computer name come out.
func FuzzWindowsName(f *testing.F) {
	for _, seed := range []string{"a", "win-12345", "my-windows-cluster-md-win-7xk2p", "win.pool.example.com",
		"cluster1-md-0-win-z9x8y", "a---------------b", "0", strings.Repeat("x", 253)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // not a name any Kubernetes object can have
		}
		vm := WindowsMachineName(name)
		prefix := WindowsScaleSetPrefix(name)
		if vm != WindowsMachineName(name) || prefix != WindowsScaleSetPrefix(name) {
			t.Fatalf("%q: names are not deterministic", name)
		}
		if len(vm) > MaxWindowsComputerName || len(vm) == 0 {
			t.Fatalf("%q -> %q: %d characters, want 1..%d", name, vm, len(vm), MaxWindowsComputerName)
		}
		if len(prefix) > MaxWindowsScaleSetPrefix || len(prefix) == 0 {
			t.Fatalf("%q -> prefix %q: %d characters, want 1..%d", name, prefix, len(prefix), MaxWindowsScaleSetPrefix)
		}
		for _, out := range []string{vm, prefix} {
			if !utf8.ValidString(out) {
				t.Fatalf("%q -> %q is not valid UTF-8", name, out)
			}
			for _, r := range out {
				if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
					t.Fatalf("%q -> %q contains %q, which Windows refuses", name, out, r)
				}
			}
			if strings.HasPrefix(out, "-") || strings.HasSuffix(out, "-") {
				t.Fatalf("%q -> %q starts or ends with '-'", name, out)
			}
		}
		// Long names keep their last five characters, which carry the
		// random suffix Cluster API gives generated machines.
		if len(name) > MaxWindowsComputerName && vm[len(vm)-5:] != sanitize(name)[len(name)-5:] {
			t.Fatalf("%q -> %q lost the last five characters", name, vm)
		}
	})
}

func TestClusterNameProblem(t *testing.T) {
	for name, ok := range map[string]bool{"demo": true, "c": true, "team-a-win": true, "12345": false, "1demo": false, "": false} {
		if got := ClusterNameProblem(name) == ""; got != ok {
			t.Errorf("ClusterNameProblem(%q) accepts: %v, want %v", name, got, ok)
		}
	}
}
