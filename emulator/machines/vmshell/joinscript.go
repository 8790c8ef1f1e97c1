package vmshell

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A Windows machine's shell is no PowerShell interpreter. It runs one
// script in whole: the one 'winkube node join' renders (and 'node leave'
// undoes), as the sequence of steps it is made of. Each step is known by
// the "winkube-step: NAME" line the script prints first; the shell reads
// the step's parameters from its text (versions, URLs, the kubelet's
// flags, kubeadm's arguments) and does on the machine what the step's
// cmdlets do on a real one, by the machine's state on its disk: the
// Containers feature, the containerd and kubelet it installed, the
// services it registered. A script with a step the shell does not know
// is refused whole, as any other script, so nothing is run half-read.
//
// Downloads are modelled as the script's Get-Verified does them: each
// release file has simulated bytes (its name and version), each published
// checksum file (dl.k8s.io's .sha256 and .sha512, containerd's
// .sha256sum) the digest of the file it is named after, and the script's
// Get-FileHash compares its own algorithm's digest of what it downloaded
// with it: a checksum of another version or file, or of another
// algorithm, stops the step as it would on a real machine.
//
// Not modelled: the clock, Defender, nssm's log rotation, and PowerShell
// itself (the script's control flow is the steps' order and each step's
// documented outcome).

// StepPrefix starts the line each step of the join script prints first.
const StepPrefix = "winkube-step: "

// StatePath is where the simulated Windows keeps what the registry and
// the service control manager would hold of the join script's work.
const StatePath = `C:\ProgramData\winkube\machine.json`

// Feature install states, as Get-WindowsFeature's InstallState names them.
const (
	FeatureInstalled = "Installed"
	FeaturePending   = "InstallPending"
)

// State is the machine's software as the join script left it.
type State struct {
	// Features are Windows features by name, with their install state.
	Features map[string]string `json:"features,omitempty"`
	// Containerd is the containerd release installed; "" for none.
	Containerd string `json:"containerd,omitempty"`
	// Kubelet is the version of C:\k\kubelet.exe; "" for none.
	Kubelet string `json:"kubelet,omitempty"`
	// KubeletArgs are the flags StartKubelet.ps1 gives the kubelet
	// beyond kubeadm's.
	KubeletArgs []string `json:"kubeletArgs,omitempty"`
	// Services are the registered services.
	Services map[string]bool `json:"services,omitempty"`
	// Node, CRISocket and APIServer are what kubeadm join joined the
	// machine as (empty before it did, and after kubeadm reset): the
	// kubelet's service runs as that node again at the next boot.
	Node      string `json:"node,omitempty"`
	CRISocket string `json:"criSocket,omitempty"`
	APIServer string `json:"apiServer,omitempty"`
}

// ReadState reads the machine's state from its disk (empty when none).
func (m *Machine) ReadState() (State, error) {
	var s State
	p, err := m.Disk.HostPath(StatePath)
	if err != nil {
		return s, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

func (m *Machine) writeState(s State) error {
	p, err := m.Disk.HostPath(StatePath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// Restarted is what a restart does to the state: features pending a
// restart are installed.
func (m *Machine) Restarted() error {
	s, err := m.ReadState()
	if err != nil {
		return err
	}
	for f, st := range s.Features {
		if st == FeaturePending {
			s.Features[f] = FeatureInstalled
		}
	}
	return m.writeState(s)
}

// HandJoin is what the join script's kubeadm join step asks of the
// machine runtime: the command's arguments and what the earlier steps
// installed.
type HandJoin struct {
	APIServer, Token, CACertHash, CRISocket, NodeName string
	// KubeletVersion and ContainerdVersion are the installed ones ("" for
	// none); KubeletArgs the kubelet's flags beyond kubeadm's.
	KubeletVersion, ContainerdVersion string
	KubeletArgs                       []string
	// ContainersFeature says the Containers feature is installed and the
	// machine restarted since.
	ContainersFeature bool
	// KubeletService says a kubelet service is registered for kubeadm to
	// start.
	KubeletService bool
}

// NodeHost is the machine runtime's side of a machine joined by hand:
// kubeadm join starts the node's kubelet, kubeadm reset stops it. Each
// returns kubeadm's exit status, its output written to out.
type NodeHost interface {
	KubeadmJoin(ctx context.Context, j HandJoin, out func(line string)) int
	KubeadmReset(ctx context.Context, out func(line string)) int
}

var stepLine = regexp.MustCompile(`^Write-Output '` + StepPrefix + `([a-z-]+)'$`)

// steps splits a script into its steps; ok is false when it has none.
// What comes before the first step (the script's functions) is
// bodies[""].
func steps(script string) (names []string, bodies map[string]string, ok bool) {
	bodies = map[string]string{}
	cur := ""
	for _, l := range strings.Split(script, "\n") {
		l = strings.TrimRight(l, "\r")
		if mm := stepLine.FindStringSubmatch(strings.TrimSpace(l)); mm != nil {
			cur = mm[1]
			names = append(names, cur)
			continue
		}
		bodies[cur] += l + "\n"
	}
	return names, bodies, len(names) > 0
}

type stepFunc func(m *Machine, s *State, body string, out io.Writer) int

var joinSteps = map[string]stepFunc{
	"preflight": preflightStep, "containers-feature": containersStep, "containerd": containerdStep,
	"kubernetes-binaries": binariesStep, "kubelet-service": kubeletServiceStep, "firewall-defender": firewallStep,
	"kubeadm-join": kubeadmJoinStep, "done": doneStep,
	// The leave script's.
	"kubeadm-reset": kubeadmResetStep, "services": servicesStep, "files": filesStep,
}

// runSteps runs a step script; it returns false when the script is not
// one (or has a step the shell does not know), leaving it to be refused.
func (m *Machine) runSteps(script string, out io.Writer) (int, bool) {
	names, bodies, ok := steps(script)
	if !ok || !m.Disk.Windows || m.cmd {
		return 0, false
	}
	for _, n := range names {
		if joinSteps[n] == nil {
			return 0, false
		}
	}
	st, err := m.ReadState()
	if err != nil {
		fmt.Fprintln(out, err)
		return exitFailed, true
	}
	m.functions = bodies[""]
	tr := m.transcript(script)
	defer tr.Close()
	w := io.MultiWriter(out, tr)
	for _, n := range names {
		fmt.Fprintln(w, StepPrefix+n)
		code := joinSteps[n](m, &st, bodies[n], w)
		if err := m.writeState(st); err != nil {
			fmt.Fprintln(w, err)
			return exitFailed, true
		}
		if code != 0 {
			return code, true
		}
	}
	return 0, true
}

type discard struct{ io.Writer }

func (discard) Close() error { return nil }

// transcript is Start-Transcript's file, when the script keeps one.
func (m *Machine) transcript(script string) io.WriteCloser {
	mm := regexp.MustCompile(`Start-Transcript -Path '([^']+)'`).FindStringSubmatch(script)
	if mm == nil {
		return discard{io.Discard}
	}
	p, err := m.Disk.HostPath(mm[1])
	if err != nil || os.MkdirAll(filepath.Dir(p), 0o755) != nil {
		return discard{io.Discard}
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return discard{io.Discard}
	}
	return f
}

var stopJoinArgs = regexp.MustCompile(`Stop-Join "((?:[^"]|` + "`\"" + `)*)" "((?:[^"]|` + "`\"" + `)*)"`)

// stopJoin prints the Stop-Join of the script line that holds marker,
// with the variables it names expanded, and returns its exit status.
func stopJoin(body, marker string, vars map[string]string, out io.Writer) int {
	what, fix := marker, ""
	for _, l := range strings.Split(body, "\n") {
		if !strings.Contains(l, marker) {
			continue
		}
		if mm := stopJoinArgs.FindStringSubmatch(l); mm != nil {
			what, fix = expand(mm[1], vars), expand(mm[2], vars)
		}
		break
	}
	fmt.Fprintln(out, "winkube: FAILED: "+what)
	if fix != "" {
		fmt.Fprintln(out, "winkube: fix: "+fix)
	}
	return exitFailed
}

var psVar = regexp.MustCompile(`\$\(\$([A-Za-z]+)\.Length\)|\$\([^)]*\)|\$env:([A-Za-z]+)|\$([A-Za-z]+)`)

// expand is a double-quoted string's variables, as PowerShell expands
// them; a subexpression the shell does not know is left as written.
func expand(s string, vars map[string]string) string {
	return psVar.ReplaceAllStringFunc(s, func(v string) string {
		mm := psVar.FindStringSubmatch(v)
		switch {
		case mm[1] != "":
			if x, ok := vars[mm[1]]; ok {
				return strconv.Itoa(len(x))
			}
		case mm[2] != "":
			if x, ok := vars["env:"+mm[2]]; ok {
				return x
			}
		case mm[3] != "":
			if x, ok := vars[mm[3]]; ok {
				return x
			}
		}
		return v
	})
}

func find(re, body string) string {
	if mm := regexp.MustCompile(re).FindStringSubmatch(body); mm != nil {
		return mm[1]
	}
	return ""
}

// preflightStep: the machine's host name, build and reach of the API
// server, and the token's expiry, as the script's checks test them.
func preflightStep(m *Machine, _ *State, body string, out io.Writer) int {
	vars := map[string]string{"name": m.Hostname, "build": m.Build}
	if max, err := strconv.Atoi(find(`\$name\.Length -gt (\d+)`, body)); err == nil && len(m.Hostname) > max {
		return stopJoin(body, "$name.Length -gt", vars, out)
	}
	if want := find(`\$name -ne '([^']+)'`, body); want != "" && !strings.EqualFold(want, m.Hostname) {
		return stopJoin(body, "$name -ne", vars, out)
	}
	if want := find(`\$build -ne (\d+)`, body); want != "" && want != m.Build {
		return stopJoin(body, "$build -ne", vars, out)
	}
	host, port := find(`Test-NetConnection -ComputerName '([^']+)'`, body), find(`Test-NetConnection -ComputerName '[^']+' -Port (\d+)`, body)
	if host != "" && port != "" {
		reached := false
		if m.Dial != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := m.Dial(ctx, host+":"+port)
			cancel()
			if err == nil {
				reached = true
				_ = c.Close()
			}
		}
		if !reached {
			return stopJoin(body, "Test-NetConnection", vars, out)
		}
	}
	// The token's expiry by the API server's clock, which is this
	// machine's: the emulated clock is never off.
	if exp, err := time.Parse(time.RFC3339, find(`\$now -gt \[DateTime\]::Parse\('([^']+)'\)`, body)); err == nil && time.Now().After(exp) {
		return stopJoin(body, "$now -gt", vars, out)
	}
	return 0
}

// containersStep: Install-WindowsFeature (the features of the step's
// foreach) and DISM's /Enable-Feature (its optional feature) install a
// feature to take effect at the next restart (RestartNeeded), so the
// script stops and asks for one, with its own status.
func containersStep(m *Machine, s *State, body string, out io.Writer) int {
	var features []string
	for _, f := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(find(`foreach \(\$feature in ([^)]*)\)`, body), -1) {
		features = append(features, f[1])
	}
	if f := find(`/Enable-Feature /FeatureName:(\S+)`, body); f != "" {
		features = append(features, f)
	}
	if s.Features == nil {
		s.Features = map[string]string{}
	}
	restart := false
	for _, f := range features {
		if s.Features[f] != FeatureInstalled {
			s.Features[f], restart = FeaturePending, true
		}
	}
	if !restart {
		return 0
	}
	if msg := find(`Write-Output "([^"]+)"`, body); msg != "" {
		fmt.Fprintln(out, msg)
	}
	code, err := strconv.Atoi(find(`exit (\d+)`, body))
	if err != nil {
		code = exitFailed
	}
	return code
}

// containerdStep installs the release the script names, writes its
// config and registers its service.
func containerdStep(m *Machine, s *State, body string, out io.Writer) int {
	want := find(`\$have -ne '([^']+)'`, body)
	if want == "" {
		fmt.Fprintln(out, "winkube: the containerd step names no version")
		return exitFailed
	}
	dir := `C:\Program Files\containerd`
	if s.Containerd != want {
		vars := map[string]string{"env:ProgramFiles": `C:\Program Files`}
		vars["ctrDir"] = expand(find(`\$ctrDir = "([^"]+)"`, body), vars)
		vars["tgz"] = expand(find(`\$tgz = "([^"]+)"`, body), vars)
		if code := m.verifiedDownloads(body, vars, out); code != 0 {
			return code
		}
		if err := m.writeFile(dir+`\containerd.exe`, fmt.Sprintf("containerd github.com/containerd/containerd v%s (simulated by winkube)\n", want)); err != nil {
			fmt.Fprintln(out, err)
			return exitFailed
		}
		s.Containerd = want
	}
	if cfg := hereString(body); cfg != "" {
		if err := m.writeFile(dir+`\config.toml`, cfg); err != nil {
			fmt.Fprintln(out, err)
			return exitFailed
		}
	}
	if s.Services == nil {
		s.Services = map[string]bool{}
	}
	s.Services["containerd"] = true
	return 0
}

// binariesStep puts kubelet.exe and kubeadm.exe of the script's version
// in C:\k.
func binariesStep(m *Machine, s *State, body string, out io.Writer) int {
	v := find(`https://dl\.k8s\.io/(v[0-9][^/]*)/bin/windows/amd64`, body)
	if v == "" {
		fmt.Fprintln(out, "winkube: the kubernetes-binaries step names no version")
		return exitFailed
	}
	// foreach ($bin in 'kubelet.exe', 'kubeadm.exe') { Get-Verified ... }
	for _, bin := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(find(`foreach \(\$bin in ([^)]*)\)`, body), -1) {
		if code := m.verifiedDownloads(body, map[string]string{"bin": bin[1]}, out); code != 0 {
			return code
		}
	}
	s.Kubelet = v
	return 0
}

var getVerified = regexp.MustCompile(`Get-Verified "([^"]+)" "([^"]+)" "([^"]+)"`)

// verifiedDownloads runs the body's Get-Verified calls, with vars for
// the variables their arguments name: the file is downloaded to its path
// and kept only when the script's Get-FileHash digest of it is the one
// its checksum URL publishes.
func (m *Machine) verifiedDownloads(body string, vars map[string]string, out io.Writer) int {
	alg := strings.ToUpper(find(`Get-FileHash -Algorithm (\w+)`, m.functions))
	for _, call := range getVerified.FindAllStringSubmatch(body, -1) {
		url, path, sumURL := expand(call[1], vars), expand(call[2], vars), expand(call[3], vars)
		fv := map[string]string{"Url": url, "Path": path, "SumUrl": sumURL}
		data, ok := publishedFile(url)
		if !ok {
			// curl --fail on an HTTP 404.
			fv["LASTEXITCODE"] = "22"
			return stopJoin(m.functions, "downloading $Url failed", fv, out)
		}
		if err := m.writeFile(path, string(data)); err != nil {
			fmt.Fprintln(out, err)
			return exitFailed
		}
		want, ok := publishedChecksum(sumURL)
		if !ok {
			return stopJoin(m.functions, "reading the checksum $SumUrl failed", fv, out)
		}
		got, ok := digest(alg, data)
		if !ok {
			fmt.Fprintf(out, "Get-FileHash : Cannot validate argument on parameter 'Algorithm'. The argument %q does not belong to the set \"SHA1,SHA256,SHA384,SHA512,MD5\".\n", alg)
			return exitFailed
		}
		// PowerShell's -ne compares strings without case: Get-FileHash
		// gives upper-case hex, the checksum files lower-case.
		if !strings.EqualFold(got, want) {
			if p, err := m.Disk.HostPath(path); err == nil {
				_ = os.Remove(p)
			}
			fv["got"], fv["want"] = got, want
			return stopJoin(m.functions, "$got -ne $want", fv, out)
		}
	}
	return 0
}

// publishedFile is the simulated content of a release file the join
// script downloads: dl.k8s.io's Windows binaries and containerd's
// Windows release tarballs; ok is false for any other URL (HTTP 404).
func publishedFile(url string) ([]byte, bool) {
	if mm := regexp.MustCompile(`^https://dl\.k8s\.io/(v[0-9][^/]*)/bin/windows/amd64/([a-z-]+)\.exe$`).FindStringSubmatch(url); mm != nil {
		return fmt.Appendf(nil, "%s %s (simulated by winkube)\n", mm[2], mm[1]), true
	}
	if mm := regexp.MustCompile(`^https://github\.com/containerd/containerd/releases/download/v([0-9.]+)/containerd-([0-9.]+)-windows-amd64\.tar\.gz$`).FindStringSubmatch(url); mm != nil && mm[1] == mm[2] {
		return fmt.Appendf(nil, "containerd %s windows-amd64 release tarball (simulated by winkube)\n", mm[1]), true
	}
	return nil, false
}

// publishedChecksum is what a checksum URL serves: dl.k8s.io publishes
// <file>.sha256 and <file>.sha512 (the hex digest alone), containerd's
// releases <tarball>.sha256sum (sha256sum's "digest  name" line, of which
// the script takes the first word).
func publishedChecksum(url string) (string, bool) {
	for _, suffix := range []struct{ ext, alg string }{{".sha256sum", "SHA256"}, {".sha256", "SHA256"}, {".sha512", "SHA512"}} {
		file, ok := strings.CutSuffix(url, suffix.ext)
		if !ok {
			continue
		}
		data, ok := publishedFile(file)
		if !ok {
			return "", false
		}
		d, _ := digest(suffix.alg, data)
		return strings.ToLower(d), true
	}
	return "", false
}

// digest is Get-FileHash's Hash: upper-case hex.
func digest(alg string, data []byte) (string, bool) {
	var sum []byte
	switch alg {
	case "SHA256":
		s := sha256.Sum256(data)
		sum = s[:]
	case "SHA512":
		s := sha512.Sum512(data)
		sum = s[:]
	default:
		return "", false
	}
	return strings.ToUpper(hex.EncodeToString(sum)), true
}

// kubeletServiceStep writes StartKubelet.ps1 and registers the kubelet's
// service; the flags it gives the kubelet are what kubeadm join's kubelet
// starts with.
func kubeletServiceStep(m *Machine, s *State, body string, out io.Writer) int {
	start := hereString(body)
	if start == "" {
		fmt.Fprintln(out, "winkube: the kubelet-service step writes no StartKubelet.ps1")
		return exitFailed
	}
	if err := m.writeFile(`C:\k\StartKubelet.ps1`, start); err != nil {
		fmt.Fprintln(out, err)
		return exitFailed
	}
	s.KubeletArgs = nil
	if line := find(`(?m)kubelet\.exe \$flags (.*)"\s*$`, start); line != "" {
		s.KubeletArgs = strings.Fields(line)
	}
	if s.Services == nil {
		s.Services = map[string]bool{}
	}
	s.Services["kubelet"] = true
	return 0
}

// firewallStep: the firewall rule and Defender's exclusions change
// nothing the simulation models (its machines have no firewall).
func firewallStep(*Machine, *State, string, io.Writer) int { return 0 }

func doneStep(*Machine, *State, string, io.Writer) int { return 0 }

var kubeadmJoinArgs = regexp.MustCompile(`kubeadm\.exe join '([^']+)' --token '([^']+)' --discovery-token-ca-cert-hash '([^']+)' --cri-socket '([^']+)' --node-name '([^']+)'`)

// kubeadmJoinStep runs kubeadm join through the machine runtime, with
// what the earlier steps installed.
func kubeadmJoinStep(m *Machine, s *State, body string, out io.Writer) int {
	mm := kubeadmJoinArgs.FindStringSubmatch(body)
	if mm == nil {
		fmt.Fprintln(out, "winkube: the kubeadm-join step's command is not one the simulated kubeadm reads")
		return exitFailed
	}
	if s.Kubelet == "" {
		// kubeadm.exe was never put in C:\k.
		return notRecognized(`C:\k\kubeadm.exe`, out)
	}
	if m.Node == nil {
		fmt.Fprintln(out, "winkube: this machine is a Cluster API node; its kubeadm runs at boot only")
		return exitFailed
	}
	j := HandJoin{APIServer: mm[1], Token: mm[2], CACertHash: mm[3], CRISocket: mm[4], NodeName: mm[5],
		KubeletVersion: s.Kubelet, ContainerdVersion: s.Containerd, KubeletArgs: s.KubeletArgs,
		ContainersFeature: s.Features["Containers"] == FeatureInstalled, KubeletService: s.Services["kubelet"]}
	if !s.Services["containerd"] {
		j.ContainerdVersion = ""
	}
	code := m.Node.KubeadmJoin(context.Background(), j, func(l string) { fmt.Fprintln(out, l) })
	if code != 0 {
		vars := map[string]string{"LASTEXITCODE": strconv.Itoa(code)}
		stopJoin(body, "$LASTEXITCODE -ne 0", vars, out)
		return exitFailed
	}
	s.Node, s.CRISocket, s.APIServer = strings.ToLower(j.NodeName), j.CRISocket, j.APIServer
	return 0
}

// notRecognized is PowerShell's CommandNotFoundException for a program
// that is not there (the text as in bootagent's ps1).
func notRecognized(path string, out io.Writer) int {
	fmt.Fprintf(out, "%s : The term '%s' is not recognized as the name of a cmdlet, function, script file, or operable program. Check the spelling of the name, or if a path was included, verify that the path is correct and try again.\n", path, path)
	return exitFailed
}

func kubeadmResetStep(m *Machine, s *State, _ string, out io.Writer) int {
	if s.Kubelet == "" || m.Node == nil {
		return 0 // Test-Path C:\k\kubeadm.exe is false: nothing runs
	}
	// The leave script runs with $ErrorActionPreference 'Continue': a
	// failed reset does not stop it.
	m.Node.KubeadmReset(context.Background(), func(l string) { fmt.Fprintln(out, l) })
	s.Node, s.CRISocket, s.APIServer = "", "", ""
	return 0
}

func servicesStep(_ *Machine, s *State, _ string, _ io.Writer) int {
	delete(s.Services, "kubelet")
	delete(s.Services, "containerd")
	return 0
}

func filesStep(m *Machine, s *State, _ string, _ io.Writer) int {
	for _, p := range []string{`C:\var\lib\kubelet`, `C:\etc\kubernetes`, `C:\var\log\kubelet`, `C:\k\kubelet.exe`, `C:\k\kubeadm.exe`, `C:\k\StartKubelet.ps1`, `C:\Program Files\containerd`} {
		if h, err := m.Disk.HostPath(p); err == nil {
			_ = os.RemoveAll(h)
		}
	}
	s.Kubelet, s.Containerd, s.KubeletArgs = "", "", nil
	return 0
}

// hereString is the body of the step's first @'...'@ here-string.
func hereString(body string) string {
	_, rest, ok := strings.Cut(body, "@'\n")
	if !ok {
		return ""
	}
	text, _, ok := strings.Cut(rest, "\n'@")
	if !ok {
		return ""
	}
	return text + "\n"
}

func (m *Machine) writeFile(path, content string) error {
	p, err := m.Disk.HostPath(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

// serviceControl is sc.exe delete NAME on the services the join script
// registers: the service is gone from the service control manager, so
// it does not start at the next boot (a running process runs on until
// then, as a service marked for deletion does).
func serviceControl(m *Machine, args []string, out, errw io.Writer) int {
	if len(args) != 2 || !strings.EqualFold(args[0], "delete") {
		return m.refuse("sc.exe "+strings.Join(args, " "), errw)
	}
	st, err := m.ReadState()
	if err != nil {
		fmt.Fprintln(errw, err)
		return exitFailed
	}
	name := strings.ToLower(args[1])
	if !st.Services[name] {
		// ERROR_SERVICE_DOES_NOT_EXIST
		fmt.Fprint(out, "[SC] OpenService FAILED 1060:\n\nThe specified service does not exist as an installed service.\n\n")
		return 1060
	}
	delete(st.Services, name)
	if err := m.writeState(st); err != nil {
		fmt.Fprintln(errw, err)
		return exitFailed
	}
	fmt.Fprintln(out, "[SC] DeleteService SUCCESS")
	return 0
}
