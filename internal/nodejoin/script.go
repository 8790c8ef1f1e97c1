package nodejoin

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"strings"
	"text/template"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/images"
)

// The script's steps replace sig-windows-tools' hand-run pair
// hostprocess/Install-Containerd.ps1 and hostprocess/PrepareNode.ps1 at
// kubernetes-sigs/sig-windows-tools 401ee6fcd8369cd8c293bd361275fdbe6f24ed07
// (UpstreamScripts), step for step; each step in the template names the
// upstream step it stands for and what it does differently:
//   - containerd at the version the cluster's Windows nodes run, else
//     image-builder's (not Install-Containerd.ps1's default 1.7.1);
//   - containerd, kubelet and kubeadm checked against their published
//     SHA-256 (upstream checks none; nssm's mirror publishes no
//     checksum, so nssm is taken as upstream takes it);
//   - no crictl (Install-Containerd.ps1 installs it "so that kubeadm can
//     talk to the CRI endpoint"): kubeadm reaches containerd through the
//     CRI client library (cmd/kubeadm/app/preflight/checks.go,
//     kubernetes/kubernetes@00b6a4c7afdbd95d9ef5b5f3cada04ac15b0c135), and
//     kubeadm's crictl check was Linux-only;
//   - the sandbox (pause) image set in containerd's config, with a 2025
//     manifest on Windows Server 2025, and never --pod-infra-container-image,
//     which a 1.34+ kubelet refuses (sig-windows-tools 6308ea8 dropped it
//     from PrepareNode.ps1 for 1.27+);
//   - the Hyper-V role enabled through DISM (no processor check) with
//     Hyper-V's PowerShell module, as CAPZ's reference images have it
//     (kubernetes-sigs/image-builder images/capi/ansible/windows/roles/systemprep/tasks/main.yml,
//     06dac3c7bc554ace093f7f86a8adee3af1ddd392: some CNIs need its VMSwitch
//     cmdlets) and as Install-Containerd.ps1 does in both its paths,
//     without its Install-WindowsFeature Hyper-V, which refuses a VM whose
//     processor shows no virtualization;
//   - no hints to apply kube-proxy from files upstream since removed: the
//     add-ons are checked in winkube's preflight instead;
//   - kubeadm join itself, on containerd's pipe, with the kubelet
//     arguments CAPZ's Windows template gives (windows-priorityclass, the
//     cloud provider's taint).
const UpstreamScripts = "kubernetes-sigs/sig-windows-tools@401ee6fcd8369cd8c293bd361275fdbe6f24ed07 hostprocess/Install-Containerd.ps1, hostprocess/PrepareNode.ps1"

// ContainerdSocket is containerd's CRI endpoint on Windows, which kubeadm
// join must be told (Install-Containerd.ps1's closing hint).
const ContainerdSocket = "npipe:////./pipe/containerd-containerd"

// DefaultContainerd is containerd's version in image-builder's node images
// (kubernetes-sigs/image-builder images/capi/packer/config/containerd.json,
// a9daf2d5bc6631f2495914dd31e3e330ddb01671: containerd_version 1.7.25, the
// Windows tarball checked by its published .sha256sum), used when the
// cluster has no Windows node of the release to take the version from.
const DefaultContainerd = "1.7.25"

// PauseImage is the sandbox image for a Windows release: Windows Server
// 2025 sandboxes need pause 3.10.2, the first with a 2025 manifest
// (kubernetes-sigs/windows-testing #557); older releases use 3.10.
func PauseImage(win infrav1.WindowsServerVersion) string {
	if win == infrav1.WindowsServer2025 {
		return "registry.k8s.io/pause:3.10.2"
	}
	return "registry.k8s.io/pause:3.10"
}

// Plan is everything the script needs.
type Plan struct {
	NodeName          string
	WindowsVersion    infrav1.WindowsServerVersion
	KubernetesVersion string // "v1.34.2"
	ContainerdVersion string // "1.7.25"
	PauseImage        string
	// APIServer is host:port of the API server as the machine reaches it.
	APIServer string
	Token     string
	// TokenExpires is when the API server stops accepting Token (zero:
	// the script does not check it).
	TokenExpires time.Time
	CAHash       string
	// CNI is "calico" or "flannel": the Defender exclusions follow it.
	CNI string
	// CloudTaint registers the node with the uninitialized taint that an
	// external cloud provider removes.
	CloudTaint bool
}

// APIServerHostPort is host:port of an API server URL (port 443 when none).
func APIServerHostPort(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("API server URL %q has no host", server)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return u.Host, nil
}

// KubeletArgs are the arguments the node's kubelet runs with beyond
// kubeadm's kubeadm-flags.env: PrepareNode.ps1's (certificate directory,
// config, kubeconfigs, host name, debugging handlers, and the three Windows
// has no cgroups or resolv.conf for), plus CAPZ's Windows ones.
func (p Plan) KubeletArgs() []string {
	args := []string{
		`--cert-dir=$env:SYSTEMDRIVE\var\lib\kubelet\pki`, "--config=/var/lib/kubelet/config.yaml",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--hostname-override=" + p.NodeName, "--enable-debugging-handlers", "--cgroups-per-qos=false",
		"--enforce-node-allocatable=`\"`\"", "--resolv-conf=`\"`\"",
		// CAPZ templates/cluster-template-windows.yaml
		// (02997da28d1cc79c90f6c9aeabe43f29047680bc) kubeletExtraArgs.
		"--windows-priorityclass=ABOVE_NORMAL_PRIORITY_CLASS",
	}
	if p.CloudTaint {
		args = append(args, "--cloud-provider=external", "--register-with-taints=node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule")
	}
	return args
}

// Script renders the PowerShell script that prepares and joins the machine.
func Script(p Plan) (string, error) {
	if _, err := images.ParseVersion(p.KubernetesVersion); err != nil {
		return "", err
	}
	build, ok := images.WindowsBuild[p.WindowsVersion]
	if !ok {
		return "", fmt.Errorf("Windows Server %q: use 2019, 2022 or 2025", p.WindowsVersion)
	}
	host, port, err := net.SplitHostPort(p.APIServer)
	if err != nil {
		return "", fmt.Errorf("API server %q is not host:port: %w", p.APIServer, err)
	}
	ctrMajor2 := strings.HasPrefix(p.ContainerdVersion, "2.")
	data := map[string]any{
		"P": p, "Build": strings.TrimPrefix(build, "10.0."), "Host": host, "Port": port,
		"KubeletArgs": strings.Join(p.KubeletArgs(), " "), "Socket": ContainerdSocket, "Upstream": UpstreamScripts,
		"Containerd2": ctrMajor2, "BinDirs": ctrMajor2 && !strings.HasPrefix(p.ContainerdVersion, "2.0."),
		"MaxName": MaxComputerName, "Exclusions": defenderExclusions(p.CNI), "TokenID": "", "TokenExpires": "",
	}
	if !p.TokenExpires.IsZero() {
		id, _, _ := strings.Cut(p.Token, ".")
		data["TokenID"], data["TokenExpires"] = id, p.TokenExpires.UTC().Format(time.RFC3339)
	}
	var b bytes.Buffer
	if err := scriptTemplate.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// defenderExclusions are the CNI binaries CAPZ's Windows template keeps
// Defender from scanning (templates/cluster-template-windows.yaml,
// 02997da28d1cc79c90f6c9aeabe43f29047680bc: calico.exe and
// calico-ipam.exe); flannel's binary by the same reasoning.
func defenderExclusions(cni string) []string {
	if cni == "flannel" {
		return []string{"C:/opt/cni/bin/flannel.exe"}
	}
	return []string{"C:/opt/cni/bin/calico.exe", "C:/opt/cni/bin/calico-ipam.exe"}
}

// Steps are the script's steps, in order.
var Steps = []string{"preflight", "containers-feature", "containerd", "kubernetes-binaries", "kubelet-service", "firewall-defender", "kubeadm-join", "done"}

// StepPrefix starts the line each step prints first, so the transcript
// (and the post-join diagnosis) tells which step failed.
const StepPrefix = "winkube-step: "

// TranscriptPath is where the script keeps its own transcript.
const TranscriptPath = `C:\k\winkube-join.log`

var scriptTemplate = template.Must(template.New("join").Option("missingkey=error").Parse(`# winkube node join: prepares this Windows Server {{.P.WindowsVersion}} machine and joins it
# as node {{.P.NodeName}} to the cluster at {{.P.APIServer}} (Kubernetes {{.P.KubernetesVersion}}).
# Its steps stand for {{.Upstream}};
# each step says where it differs. Run it as Administrator; it stops at the first failure.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
New-Item -ItemType Directory -Force -Path C:\k | Out-Null
Start-Transcript -Path '` + TranscriptPath + `' -Append | Out-Null

function Stop-Join([string]$What, [string]$Fix) {
    Write-Output "winkube: FAILED: $What"
    Write-Output "winkube: fix: $Fix"
    Stop-Transcript | Out-Null
    exit 1
}

# Downloads $Url to $Path and checks it against the SHA-256 published at
# $SumUrl (upstream's DownloadFile checks nothing).
function Get-Verified([string]$Url, [string]$Path, [string]$SumUrl) {
    curl.exe --silent --fail --location --output $Path $Url
    if ($LASTEXITCODE -ne 0) { Stop-Join "downloading $Url failed (curl exit $LASTEXITCODE)" "let this machine reach $Url (proxy, firewall, DNS)" }
    $want = ((curl.exe --silent --fail --location $SumUrl) -split '\s+')[0]
    if ($LASTEXITCODE -ne 0 -or -not $want) { Stop-Join "reading the checksum $SumUrl failed" "let this machine reach $SumUrl" }
    $got = (Get-FileHash -Algorithm SHA256 -Path $Path).Hash
    if ($got -ne $want) { Remove-Item -Force $Path; Stop-Join "$Path has SHA-256 $got but $SumUrl publishes $want" "check that $SumUrl is the SHA-256 of $Url (the same version and file); if it is, download again: a proxy or mirror altered the file" }
}

Write-Output '` + StepPrefix + `preflight'
# Not upstream's: the machine's half of winkube's preflight.
$name = hostname
if ($name.Length -gt {{.MaxName}}) { Stop-Join "host name $name has $($name.Length) characters; Windows computer names are at most {{.MaxName}} (NetBIOS)" "Rename-Computer -NewName NAME -Restart with {{.MaxName}} characters or fewer, then run this again" }
if ($name -ne '{{.P.NodeName}}') { Stop-Join "host name is $name, but this script was made for {{.P.NodeName}}" "run winkube node join again for this machine's name" }
$build = [Environment]::OSVersion.Version.Build
if ($build -ne {{.Build}}) { Stop-Join "this is Windows build $build, not Windows Server {{.P.WindowsVersion}} (build {{.Build}})" "run winkube node join with --windows-version of this machine" }
if (-not (Test-NetConnection -ComputerName '{{.Host}}' -Port {{.Port}} -InformationLevel Quiet)) { Stop-Join "the API server {{.P.APIServer}} does not answer on TCP {{.Port}} from this machine" "open TCP {{.Port}} from this machine to {{.Host}} (firewall, NSG, routing)" }
$date = (curl.exe --silent --insecure --head 'https://{{.P.APIServer}}/healthz' | Select-String '^Date:') -replace '^Date:\s*', ''
if ($date) { $skew = [Math]::Abs(((Get-Date).ToUniversalTime() - [DateTime]::Parse($date).ToUniversalTime()).TotalMinutes); if ($skew -gt 5) { Stop-Join "this machine's clock is $([Math]::Round($skew)) minutes off the API server's" "sync the clock: w32tm /resync (and a time source: w32tm /config /syncfromflags:manual /manualpeerlist:time.windows.com)" } }
{{- if .TokenExpires}}
# A printed script run late: its token expired by the API server's clock,
# and kubeadm join would only say that cluster-info has no signature for it.
$now = if ($date) { [DateTime]::Parse($date).ToUniversalTime() } else { (Get-Date).ToUniversalTime() }
if ($now -gt [DateTime]::Parse('{{.TokenExpires}}').ToUniversalTime()) { Stop-Join "the bootstrap token {{.TokenID}} expired at {{.TokenExpires}}; the API server no longer accepts it" "run winkube node join again for a script with a new token (--token-ttl sets its lifetime)" }
{{- end}}

Write-Output '` + StepPrefix + `containers-feature'
# Install-Containerd.ps1: the Containers feature and Hyper-V. As in CAPZ's
# reference image, the Hyper-V role is enabled through DISM, which skips
# the processor check, and its PowerShell module added: some CNIs use its
# VMSwitch cmdlets. Each takes effect at the next restart.
$restart = $false
foreach ($feature in 'Containers', 'Hyper-V-PowerShell') {
    if (-not (Get-WindowsFeature -Name $feature).Installed) { Install-WindowsFeature -Name $feature | Out-Null; $restart = $true }
}
if ((Get-WindowsOptionalFeature -Online -FeatureName Microsoft-Hyper-V).State -ne 'Enabled') {
    dism.exe /Online /Enable-Feature /FeatureName:Microsoft-Hyper-V /All /NoRestart | Out-Null
    $restart = $true
}
if ($restart) {
    Write-Output "winkube: the Containers and Hyper-V features were installed: restart the machine (Restart-Computer) and run this script again"
    Stop-Transcript | Out-Null
    exit 3010
}

Write-Output '` + StepPrefix + `containerd'
# Install-Containerd.ps1: containerd's release tarball, its config, the CNI
# directories, the service. Here at the cluster's version ({{.P.ContainerdVersion}}),
# checked against its .sha256sum, with the sandbox image set in the config.
$ctrDir = "$env:ProgramFiles\containerd"
$have = ''
if (Get-Service -Name containerd -ErrorAction SilentlyContinue) {
    $have = ((& "$ctrDir\containerd.exe" --version) -split '\s+')[2] -replace '^v', ''
}
if ($have -ne '{{.P.ContainerdVersion}}') {
    if ($have) { Stop-Service -Name containerd; & "$ctrDir\containerd.exe" --unregister-service }
    New-Item -ItemType Directory -Force -Path $ctrDir | Out-Null
    $tgz = "containerd-{{.P.ContainerdVersion}}-windows-amd64.tar.gz"
    Get-Verified "https://github.com/containerd/containerd/releases/download/v{{.P.ContainerdVersion}}/$tgz" "$ctrDir\$tgz" "https://github.com/containerd/containerd/releases/download/v{{.P.ContainerdVersion}}/$tgz.sha256sum"
    tar.exe -xf "$ctrDir\$tgz" --strip-components=1 -C $ctrDir
    if ($LASTEXITCODE -ne 0) { Stop-Join "unpacking $tgz failed" "free disk space on C: and run this again" }
}
New-Item -ItemType Directory -Force -Path C:\opt\cni\bin, C:\etc\cni\net.d | Out-Null
@'
{{- if .Containerd2}}
version = 3
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{{.P.PauseImage}}'
[plugins.'io.containerd.cri.v1.runtime'.cni]
{{- if .BinDirs}}
  bin_dirs = ['c:/opt/cni/bin']
{{- else}}
  bin_dir = 'c:/opt/cni/bin'
{{- end}}
  conf_dir = 'c:/etc/cni/net.d'
{{- else}}
version = 2
[plugins.'io.containerd.grpc.v1.cri']
  sandbox_image = '{{.P.PauseImage}}'
[plugins.'io.containerd.grpc.v1.cri'.cni]
  bin_dir = 'c:/opt/cni/bin'
  conf_dir = 'c:/etc/cni/net.d'
{{- end}}
'@ | Set-Content -Path "$ctrDir\config.toml" -Encoding ascii
[Environment]::SetEnvironmentVariable('Path', [Environment]::GetEnvironmentVariable('Path', 'Machine') + ";$ctrDir;C:\k", 'Machine')
if (-not (Get-Service -Name containerd -ErrorAction SilentlyContinue)) { & "$ctrDir\containerd.exe" --register-service --config "$ctrDir\config.toml" }
Restart-Service -Name containerd
if (-not (Test-Path '//./pipe/containerd-containerd')) { Stop-Join "containerd started but its pipe //./pipe/containerd-containerd is missing" "read containerd's events: Get-WinEvent -ProviderName containerd -MaxEvents 20" }

Write-Output '` + StepPrefix + `kubernetes-binaries'
# PrepareNode.ps1: kubelet.exe and kubeadm.exe from dl.k8s.io at the
# cluster's version, here checked against their published .sha256.
foreach ($bin in 'kubelet.exe', 'kubeadm.exe') {
    Get-Verified "https://dl.k8s.io/{{.P.KubernetesVersion}}/bin/windows/amd64/$bin" "C:\k\$bin" "https://dl.k8s.io/{{.P.KubernetesVersion}}/bin/windows/amd64/$bin.sha256"
}

Write-Output '` + StepPrefix + `kubelet-service'
# PrepareNode.ps1: the kubelet's directories, StartKubelet.ps1 (kubeadm's
# flags plus the node's own; never --pod-infra-container-image), and the
# kubelet as an nssm service that depends on containerd.
New-Item -ItemType Directory -Force -Path C:\var\log\kubelet, C:\var\lib\kubelet\etc\kubernetes, C:\etc\kubernetes\pki, C:\etc\kubernetes\manifests | Out-Null
if (-not (Test-Path C:\var\lib\kubelet\etc\kubernetes\pki)) { New-Item -Path C:\var\lib\kubelet\etc\kubernetes\pki -ItemType SymbolicLink -Value C:\etc\kubernetes\pki\ | Out-Null }
@'
$flags = ((Get-Content -Path C:\var\lib\kubelet\kubeadm-flags.env -Raw).Trim() -replace '^KUBELET_KUBEADM_ARGS=', '').Trim('"')
Invoke-Expression "C:\k\kubelet.exe $flags {{.KubeletArgs}}"
'@ | Set-Content -Path C:\k\StartKubelet.ps1
$nssmDir = "$env:ProgramFiles\nssm"
if (-not (Test-Path "$nssmDir\nssm.exe")) {
    New-Item -ItemType Directory -Force -Path $nssmDir | Out-Null
    curl.exe --silent --fail --location --output C:\k\nssm.zip https://k8stestinfrabinaries.blob.core.windows.net/nssm-mirror/nssm-2.24.zip
    if ($LASTEXITCODE -ne 0) { Stop-Join "downloading nssm failed" "let this machine reach k8stestinfrabinaries.blob.core.windows.net" }
    tar.exe -C $nssmDir -xf C:\k\nssm.zip --strip-components 2 */win64/*.exe
    Remove-Item -Force C:\k\nssm.zip
}
$nssm = "$nssmDir\nssm.exe"
if (-not (Get-Service -Name kubelet -ErrorAction SilentlyContinue)) {
    & $nssm install kubelet (Get-Command powershell).Source '-ExecutionPolicy Bypass -NoProfile' C:\k\StartKubelet.ps1
}
& $nssm set kubelet AppStdout C:\var\log\kubelet\kubelet.out.log
& $nssm set kubelet AppStderr C:\var\log\kubelet\kubelet.err.log
& $nssm set kubelet AppRotateFiles 1
& $nssm set kubelet AppRotateOnline 1
& $nssm set kubelet AppRotateSeconds 86400
& $nssm set kubelet AppRotateBytes 10485760
& $nssm set kubelet DependOnService containerd

Write-Output '` + StepPrefix + `firewall-defender'
# PrepareNode.ps1: the kubelet's port 10250 open inbound (the API server
# reaches it for logs, exec and metrics). CAPZ's Windows template: Defender
# does not scan the CNI's binaries.
if (-not (Get-NetFirewallRule -Name kubelet -ErrorAction SilentlyContinue)) {
    New-NetFirewallRule -Name kubelet -DisplayName 'kubelet' -Enabled True -Direction Inbound -Protocol TCP -Action Allow -LocalPort 10250 | Out-Null
}
{{- range .Exclusions}}
Add-MpPreference -ExclusionProcess '{{.}}'
{{- end}}

Write-Output '` + StepPrefix + `kubeadm-join'
# Not in upstream's scripts (they end with hints): kubeadm join on
# containerd's pipe, with the token winkube made and the CA's hash.
& C:\k\kubeadm.exe join '{{.P.APIServer}}' --token '{{.P.Token}}' --discovery-token-ca-cert-hash '{{.P.CAHash}}' --cri-socket '{{.Socket}}' --node-name '{{.P.NodeName}}'
if ($LASTEXITCODE -ne 0) { Stop-Join "kubeadm join failed (exit $LASTEXITCODE)" "read its output above and the kubelet's log C:\var\log\kubelet\kubelet.err.log; winkube node join diagnoses it" }
# CAPZ's Windows template: the kubelet starts with the machine.
& $nssm set kubelet Start SERVICE_AUTO_START

Write-Output '` + StepPrefix + `done'
Stop-Transcript | Out-Null
`))
