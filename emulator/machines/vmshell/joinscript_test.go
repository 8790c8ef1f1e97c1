package vmshell

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeHost records the kubeadm the join script's last step asks for; the
// machine runtime's real one is exercised by the local world's node join.
type fakeHost struct {
	joins  []HandJoin
	resets int
}

func (f *fakeHost) KubeadmJoin(_ context.Context, j HandJoin, out func(string)) int {
	f.joins = append(f.joins, j)
	out("This node has joined the cluster:")
	return 0
}

func (f *fakeHost) KubeadmReset(_ context.Context, _ func(string)) int { f.resets++; return 0 }

func script(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// plainWindows is a Windows Server 2022 machine that reaches the API
// server of the testdata script (127.0.0.9:6443).
func plainWindows(t *testing.T, name string) (*Machine, *fakeHost) {
	m := windowsMachine(t)
	host := &fakeHost{}
	m.Hostname, m.Build, m.Node = name, "20348", host
	m.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		if addr != "127.0.0.9:6443" {
			return nil, &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}
		}
		c, s := net.Pipe()
		_ = s.Close()
		return c, nil
	}
	return m, host
}

// TestJoinScriptRunsStepByStep: the shell runs 'node join's script as
// its steps. Without the Containers feature the script installs it and
// stops for a restart (exit 3010), as Install-WindowsFeature leaves it
// pending; after the restart every step runs and kubeadm join gets what
// the steps installed.
func TestJoinScriptRunsStepByStep(t *testing.T) {
	m, host := plainWindows(t, "byo-win-1")
	join := script(t, "join.ps1")
	out, errs, code := run(m, join)
	if code != 3010 || !strings.Contains(out, "winkube-step: containers-feature") || !strings.Contains(out, "restart the machine") {
		t.Fatalf("first run without the Containers feature: status %d, out %q, err %q; want 3010 and the restart asked for", code, out, errs)
	}
	if len(host.joins) != 0 {
		t.Fatalf("kubeadm join ran before the restart: %+v", host.joins)
	}
	// The Hyper-V role and its PowerShell module too, as CAPZ's images
	// have them.
	if st, _ := m.ReadState(); st.Features["Containers"] != FeaturePending || st.Features["Microsoft-Hyper-V"] != FeaturePending || st.Features["Hyper-V-PowerShell"] != FeaturePending {
		t.Errorf("features after the first run: %v, want Containers and Hyper-V pending a restart", st.Features)
	}
	if out, _, code = run(m, join); code != 3010 {
		t.Fatalf("second run before a restart: status %d (%s), want 3010 again: the feature is pending", code, out)
	}
	if err := m.Restarted(); err != nil {
		t.Fatal(err)
	}
	out, errs, code = run(m, join)
	if code != 0 {
		t.Fatalf("after the restart: status %d\n%s%s", code, out, errs)
	}
	var steps []string
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, StepPrefix); ok {
			steps = append(steps, s)
		}
	}
	want := []string{"preflight", "containers-feature", "containerd", "kubernetes-binaries", "kubelet-service", "firewall-defender", "kubeadm-join", "done"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if len(host.joins) != 1 {
		t.Fatalf("kubeadm join ran %d times", len(host.joins))
	}
	j := host.joins[0]
	if j.APIServer != "127.0.0.9:6443" || j.Token != "abcdef.0123456789abcdef" || j.NodeName != "byo-win-1" || j.CRISocket != "npipe:////./pipe/containerd-containerd" ||
		j.KubeletVersion != "v1.36.3" || j.ContainerdVersion != "1.7.25" || !j.ContainersFeature ||
		!slices.Contains(j.KubeletArgs, "--windows-priorityclass=ABOVE_NORMAL_PRIORITY_CLASS") {
		t.Errorf("kubeadm join got %+v", j)
	}
	for _, f := range []string{`C:\k\kubelet.exe`, `C:\k\StartKubelet.ps1`, `C:\Program Files\containerd\config.toml`, `C:\k\winkube-join.log`} {
		if p, _ := m.Disk.HostPath(f); !exists(p) {
			t.Errorf("%s was not written", f)
		}
	}
	cfg, _ := m.Disk.HostPath(`C:\Program Files\containerd\config.toml`)
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), "sandbox_image = 'registry.k8s.io/pause:3.10'") {
		t.Errorf("containerd's config: %s", b)
	}

	out, _, code = run(m, script(t, "leave.ps1"))
	if code != 0 || host.resets != 1 {
		t.Fatalf("leave script: status %d, %d resets\n%s", code, host.resets, out)
	}
	if p, _ := m.Disk.HostPath(`C:\k\kubelet.exe`); exists(p) {
		t.Errorf("the leave script left kubelet.exe")
	}
	if st, _ := m.ReadState(); st.Kubelet != "" || st.Services["kubelet"] || st.Features["Containers"] != FeatureInstalled {
		t.Errorf("state after leave: %+v, want no kubelet and the feature kept", st)
	}
}

// A machine the script does not fit fails in the script's preflight, with
// its own message and fix: a host name longer than NetBIOS allows, an API
// server it cannot reach, a token that expired before the script ran.
func TestJoinScriptPreflightFailures(t *testing.T) {
	m, host := plainWindows(t, "byo-windows-0001")
	out, _, code := run(m, script(t, "join.ps1"))
	if code != 1 || !strings.Contains(out, "winkube: FAILED: host name byo-windows-0001 has 16 characters; Windows computer names are at most 15 (NetBIOS)") ||
		!strings.Contains(out, "winkube: fix: Rename-Computer") {
		t.Errorf("16-character host name: status %d\n%s", code, out)
	}
	m, _ = plainWindows(t, "byo-win-1")
	m.Dial = func(context.Context, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}
	}
	out, _, code = run(m, script(t, "join.ps1"))
	if code != 1 || !strings.Contains(out, "winkube: FAILED: the API server 127.0.0.9:6443 does not answer on TCP 6443 from this machine") {
		t.Errorf("unreachable API server: status %d\n%s", code, out)
	}
	m, _ = plainWindows(t, "byo-win-1")
	m.Build = "17763"
	out, _, code = run(m, script(t, "join.ps1"))
	if code != 1 || !strings.Contains(out, "this is Windows build 17763, not Windows Server 2022 (build 20348)") {
		t.Errorf("a 2019 machine given a 2022 script: status %d\n%s", code, out)
	}
	if len(host.joins) != 0 {
		t.Errorf("kubeadm join ran after a failed preflight")
	}

	// A closed API port: a real TCP port nothing listens on any more
	// refuses the connection.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	m, refused := plainWindows(t, "byo-win-1")
	m.Dial = func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", closed)
	}
	out, _, code = run(m, script(t, "join.ps1"))
	if code != 1 || !strings.Contains(out, "winkube-step: preflight\nwinkube: FAILED: the API server 127.0.0.9:6443 does not answer on TCP 6443") ||
		!strings.Contains(out, "winkube: fix: open TCP 6443 from this machine to 127.0.0.9") {
		t.Errorf("a closed API port: status %d\n%s", code, out)
	}

	// A printed script run after its token's expiry: kubeadm join would
	// only find no signature for the token in cluster-info.
	m, late := plainWindows(t, "byo-win-1")
	out, _, code = run(m, strings.Replace(script(t, "join.ps1"), "2099-01-01T00:00:00Z", "2020-01-01T00:00:00Z", 2))
	if code != 1 || !strings.Contains(out, "winkube-step: preflight\nwinkube: FAILED: the bootstrap token abcdef expired at 2020-01-01T00:00:00Z") ||
		!strings.Contains(out, "winkube: fix: run winkube node join again for a script with a new token") {
		t.Errorf("an expired token: status %d\n%s", code, out)
	}
	if len(refused.joins)+len(late.joins) != 0 {
		t.Errorf("kubeadm join ran after a failed preflight")
	}
}

// A script with a step the shell does not know is refused whole.
func TestUnknownStepRefusesTheScript(t *testing.T) {
	m, host := plainWindows(t, "byo-win-1")
	s := strings.Replace(script(t, "join.ps1"), "winkube-step: firewall-defender", "winkube-step: format-disk", 1)
	_, errs, code := run(m, s)
	if code != exitNotFound || !strings.Contains(errs, "cannot run") || len(host.joins) != 0 {
		t.Errorf("unknown step: status %d, %q, joins %d", code, errs, len(host.joins))
	}
	if st, _ := m.ReadState(); st.Features["Containers"] != "" {
		t.Errorf("a refused script changed the machine: %+v", st)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Each download is checked as the script's Get-Verified checks it: a
// checksum URL of another version (a script edited in one place) or of
// another algorithm (dl.k8s.io's .sha512 compared as SHA-256) stops the
// step with Get-FileHash's upper-case digest against the published one,
// and the file is removed; nothing is joined.
func TestJoinScriptChecksDownloadsAgainstTheirChecksums(t *testing.T) {
	join := script(t, "join.ps1")
	for _, c := range []struct {
		name, from, to, step, path, sum string
	}{
		{"kubelet's checksum of another version", "/v1.36.3/bin/windows/amd64/$bin.sha256", "/v1.36.2/bin/windows/amd64/$bin.sha256", "kubernetes-binaries", `C:\k\kubelet.exe`,
			"https://dl.k8s.io/v1.36.2/bin/windows/amd64/kubelet.exe.sha256"},
		{"a SHA-512 file compared as SHA-256", "/v1.36.3/bin/windows/amd64/$bin.sha256", "/v1.36.3/bin/windows/amd64/$bin.sha512", "kubernetes-binaries", `C:\k\kubelet.exe`,
			"https://dl.k8s.io/v1.36.3/bin/windows/amd64/kubelet.exe.sha512"},
		{"containerd's checksum of another release", "download/v1.7.25/$tgz.sha256sum", "download/v1.7.24/containerd-1.7.24-windows-amd64.tar.gz.sha256sum", "containerd", `C:\Program Files\containerd\containerd-1.7.25-windows-amd64.tar.gz`,
			"https://github.com/containerd/containerd/releases/download/v1.7.24/containerd-1.7.24-windows-amd64.tar.gz.sha256sum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(join, c.from) {
				t.Fatalf("the script has no %q", c.from)
			}
			m, host := plainWindows(t, "byo-win-1")
			st := State{Features: featuresInstalled()}
			if err := m.writeState(st); err != nil {
				t.Fatal(err)
			}
			out, _, code := run(m, strings.Replace(join, c.from, c.to, 1))
			file := c.path[strings.LastIndex(c.path, `\`)+1:]
			want := "winkube-step: " + c.step + "\nwinkube: FAILED: " + c.path + " has SHA-256 "
			if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "winkube: fix: check that ") {
				t.Fatalf("status %d, want 1 and %q\n%s", code, want, out)
			}
			line := out[strings.Index(out, "winkube: FAILED: "):]
			line = line[:strings.Index(line, "\n")]
			f := strings.Fields(line)
			// FAILED: PATH... has SHA-256 GOT but SUMURL publishes WANT
			got, sumURL, pub := f[len(f)-5], f[len(f)-3], f[len(f)-1]
			if got != strings.ToUpper(got) || len(got) != 64 || pub != strings.ToLower(pub) || strings.EqualFold(got, pub) || sumURL != c.sum {
				t.Errorf("failure line %q: want Get-FileHash's upper-case SHA-256, the checksum URL and its other, lower-case digest", line)
			}
			if c.name == "a SHA-512 file compared as SHA-256" && len(pub) != 128 {
				t.Errorf("published %q is not a SHA-512", pub)
			}
			if p, _ := m.Disk.HostPath(c.path); exists(p) {
				t.Errorf("%s was kept after its checksum failed", file)
			}
			if len(host.joins) != 0 {
				t.Errorf("kubeadm join ran after a failed download")
			}
		})
	}
	// The script as rendered: every checksum matches.
	m, host := plainWindows(t, "byo-win-1")
	if err := m.writeState(State{Features: featuresInstalled()}); err != nil {
		t.Fatal(err)
	}
	if out, _, code := run(m, join); code != 0 || len(host.joins) != 1 {
		t.Fatalf("the rendered script: status %d, %d joins\n%s", code, len(host.joins), out)
	}
}

// What a restart needs is on the machine after the join: the services
// the script registered and the node kubeadm join joined as. sc.exe
// delete unregisters a service (it will not start at the next boot); a
// script without the kubelet-service step hands kubeadm join no kubelet
// service to start.
func TestJoinLeavesServicesForTheNextBoot(t *testing.T) {
	m, host := plainWindows(t, "byo-win-1")
	if err := m.writeState(State{Features: featuresInstalled()}); err != nil {
		t.Fatal(err)
	}
	join := script(t, "join.ps1")
	if out, _, code := run(m, join); code != 0 || len(host.joins) != 1 || !host.joins[0].KubeletService {
		t.Fatalf("join: status %d, joins %+v\n%s", code, host.joins, out)
	}
	st, _ := m.ReadState()
	if !st.Services["kubelet"] || !st.Services["containerd"] || st.Node != "byo-win-1" || st.CRISocket != "npipe:////./pipe/containerd-containerd" || st.APIServer != "127.0.0.9:6443" {
		t.Fatalf("state after the join: %+v, want both services and the node recorded", st)
	}
	if out, _, code := run(m, "sc.exe delete kubelet"); code != 0 || out != "[SC] DeleteService SUCCESS\n" {
		t.Errorf("sc.exe delete kubelet: %d %q", code, out)
	}
	if out, _, code := run(m, "sc.exe delete kubelet"); code != 1060 || !strings.Contains(out, "The specified service does not exist as an installed service.") {
		t.Errorf("sc.exe delete of a deleted service: %d %q", code, out)
	}
	if st, _ := m.ReadState(); st.Services["kubelet"] || !st.Services["containerd"] {
		t.Errorf("services after sc.exe delete kubelet: %v", st.Services)
	}

	// The same script without its kubelet-service step.
	m, host = plainWindows(t, "byo-win-1")
	if err := m.writeState(State{Features: featuresInstalled()}); err != nil {
		t.Fatal(err)
	}
	start := strings.Index(join, "Write-Output 'winkube-step: kubelet-service'")
	end := strings.Index(join, "Write-Output 'winkube-step: firewall-defender'")
	run(m, join[:start]+join[end:])
	if len(host.joins) != 1 || host.joins[0].KubeletService {
		t.Errorf("kubeadm join without the kubelet-service step got %+v, want no kubelet service", host.joins)
	}
}

// featuresInstalled are the features the join script installs, installed.
func featuresInstalled() map[string]string {
	return map[string]string{"Containers": FeatureInstalled, "Hyper-V-PowerShell": FeatureInstalled, "Microsoft-Hyper-V": FeatureInstalled}
}
