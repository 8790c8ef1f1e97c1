# winkube node join: prepares this Windows Server 2022 machine and joins it
# as node byo-win-1 to the cluster at 127.0.0.9:6443 (Kubernetes v1.36.3).
# Its steps stand for kubernetes-sigs/sig-windows-tools@401ee6fcd8369cd8c293bd361275fdbe6f24ed07 hostprocess/Install-Containerd.ps1, hostprocess/PrepareNode.ps1;
# each step says where it differs. Run it as Administrator; it stops at the first failure.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
New-Item -ItemType Directory -Force -Path C:\k | Out-Null
Start-Transcript -Path 'C:\k\winkube-join.log' -Append | Out-Null

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

Write-Output 'winkube-step: preflight'
# Not upstream's: the machine's half of winkube's preflight.
$name = hostname
if ($name.Length -gt 15) { Stop-Join "host name $name has $($name.Length) characters; Windows computer names are at most 15 (NetBIOS)" "Rename-Computer -NewName NAME -Restart with 15 characters or fewer, then run this again" }
if ($name -ne 'byo-win-1') { Stop-Join "host name is $name, but this script was made for byo-win-1" "run winkube node join again for this machine's name" }
$build = [Environment]::OSVersion.Version.Build
if ($build -ne 20348) { Stop-Join "this is Windows build $build, not Windows Server 2022 (build 20348)" "run winkube node join with --windows-version of this machine" }
if (-not (Test-NetConnection -ComputerName '127.0.0.9' -Port 6443 -InformationLevel Quiet)) { Stop-Join "the API server 127.0.0.9:6443 does not answer on TCP 6443 from this machine" "open TCP 6443 from this machine to 127.0.0.9 (firewall, NSG, routing)" }
$date = (curl.exe --silent --insecure --head 'https://127.0.0.9:6443/healthz' | Select-String '^Date:') -replace '^Date:\s*', ''
if ($date) { $skew = [Math]::Abs(((Get-Date).ToUniversalTime() - [DateTime]::Parse($date).ToUniversalTime()).TotalMinutes); if ($skew -gt 5) { Stop-Join "this machine's clock is $([Math]::Round($skew)) minutes off the API server's" "sync the clock: w32tm /resync (and a time source: w32tm /config /syncfromflags:manual /manualpeerlist:time.windows.com)" } }
# A printed script run late: its token expired by the API server's clock,
# and kubeadm join would only say that cluster-info has no signature for it.
$now = if ($date) { [DateTime]::Parse($date).ToUniversalTime() } else { (Get-Date).ToUniversalTime() }
if ($now -gt [DateTime]::Parse('2099-01-01T00:00:00Z').ToUniversalTime()) { Stop-Join "the bootstrap token abcdef expired at 2099-01-01T00:00:00Z; the API server no longer accepts it" "run winkube node join again for a script with a new token (--token-ttl sets its lifetime)" }

Write-Output 'winkube-step: containers-feature'
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

Write-Output 'winkube-step: containerd'
# Install-Containerd.ps1: containerd's release tarball, its config, the CNI
# directories, the service. Here at the cluster's version (1.7.25),
# checked against its .sha256sum, with the sandbox image set in the config.
$ctrDir = "$env:ProgramFiles\containerd"
$have = ''
if (Get-Service -Name containerd -ErrorAction SilentlyContinue) {
    $have = ((& "$ctrDir\containerd.exe" --version) -split '\s+')[2] -replace '^v', ''
}
if ($have -ne '1.7.25') {
    if ($have) { Stop-Service -Name containerd; & "$ctrDir\containerd.exe" --unregister-service }
    New-Item -ItemType Directory -Force -Path $ctrDir | Out-Null
    $tgz = "containerd-1.7.25-windows-amd64.tar.gz"
    Get-Verified "https://github.com/containerd/containerd/releases/download/v1.7.25/$tgz" "$ctrDir\$tgz" "https://github.com/containerd/containerd/releases/download/v1.7.25/$tgz.sha256sum"
    tar.exe -xf "$ctrDir\$tgz" --strip-components=1 -C $ctrDir
    if ($LASTEXITCODE -ne 0) { Stop-Join "unpacking $tgz failed" "free disk space on C: and run this again" }
}
New-Item -ItemType Directory -Force -Path C:\opt\cni\bin, C:\etc\cni\net.d | Out-Null
@'
version = 2
[plugins.'io.containerd.grpc.v1.cri']
  sandbox_image = 'registry.k8s.io/pause:3.10'
[plugins.'io.containerd.grpc.v1.cri'.cni]
  bin_dir = 'c:/opt/cni/bin'
  conf_dir = 'c:/etc/cni/net.d'
'@ | Set-Content -Path "$ctrDir\config.toml" -Encoding ascii
[Environment]::SetEnvironmentVariable('Path', [Environment]::GetEnvironmentVariable('Path', 'Machine') + ";$ctrDir;C:\k", 'Machine')
if (-not (Get-Service -Name containerd -ErrorAction SilentlyContinue)) { & "$ctrDir\containerd.exe" --register-service --config "$ctrDir\config.toml" }
Restart-Service -Name containerd
if (-not (Test-Path '//./pipe/containerd-containerd')) { Stop-Join "containerd started but its pipe //./pipe/containerd-containerd is missing" "read containerd's events: Get-WinEvent -ProviderName containerd -MaxEvents 20" }

Write-Output 'winkube-step: kubernetes-binaries'
# PrepareNode.ps1: kubelet.exe and kubeadm.exe from dl.k8s.io at the
# cluster's version, here checked against their published .sha256.
foreach ($bin in 'kubelet.exe', 'kubeadm.exe') {
    Get-Verified "https://dl.k8s.io/v1.36.3/bin/windows/amd64/$bin" "C:\k\$bin" "https://dl.k8s.io/v1.36.3/bin/windows/amd64/$bin.sha256"
}

Write-Output 'winkube-step: kubelet-service'
# PrepareNode.ps1: the kubelet's directories, StartKubelet.ps1 (kubeadm's
# flags plus the node's own; never --pod-infra-container-image), and the
# kubelet as an nssm service that depends on containerd.
New-Item -ItemType Directory -Force -Path C:\var\log\kubelet, C:\var\lib\kubelet\etc\kubernetes, C:\etc\kubernetes\pki, C:\etc\kubernetes\manifests | Out-Null
if (-not (Test-Path C:\var\lib\kubelet\etc\kubernetes\pki)) { New-Item -Path C:\var\lib\kubelet\etc\kubernetes\pki -ItemType SymbolicLink -Value C:\etc\kubernetes\pki\ | Out-Null }
@'
$flags = ((Get-Content -Path C:\var\lib\kubelet\kubeadm-flags.env -Raw).Trim() -replace '^KUBELET_KUBEADM_ARGS=', '').Trim('"')
Invoke-Expression "C:\k\kubelet.exe $flags --cert-dir=$env:SYSTEMDRIVE\var\lib\kubelet\pki --config=/var/lib/kubelet/config.yaml --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --hostname-override=byo-win-1 --enable-debugging-handlers --cgroups-per-qos=false --enforce-node-allocatable=`"`" --resolv-conf=`"`" --windows-priorityclass=ABOVE_NORMAL_PRIORITY_CLASS --cloud-provider=external --register-with-taints=node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"
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

Write-Output 'winkube-step: firewall-defender'
# PrepareNode.ps1: the kubelet's port 10250 open inbound (the API server
# reaches it for logs, exec and metrics). CAPZ's Windows template: Defender
# does not scan the CNI's binaries.
if (-not (Get-NetFirewallRule -Name kubelet -ErrorAction SilentlyContinue)) {
    New-NetFirewallRule -Name kubelet -DisplayName 'kubelet' -Enabled True -Direction Inbound -Protocol TCP -Action Allow -LocalPort 10250 | Out-Null
}
Add-MpPreference -ExclusionProcess 'C:/opt/cni/bin/calico.exe'
Add-MpPreference -ExclusionProcess 'C:/opt/cni/bin/calico-ipam.exe'

Write-Output 'winkube-step: kubeadm-join'
# Not in upstream's scripts (they end with hints): kubeadm join on
# containerd's pipe, with the token winkube made and the CA's hash.
& C:\k\kubeadm.exe join '127.0.0.9:6443' --token 'abcdef.0123456789abcdef' --discovery-token-ca-cert-hash 'sha256:0000000000000000000000000000000000000000000000000000000000000000' --cri-socket 'npipe:////./pipe/containerd-containerd' --node-name 'byo-win-1'
if ($LASTEXITCODE -ne 0) { Stop-Join "kubeadm join failed (exit $LASTEXITCODE)" "read its output above and the kubelet's log C:\var\log\kubelet\kubelet.err.log; winkube node join diagnoses it" }
# CAPZ's Windows template: the kubelet starts with the machine.
& $nssm set kubelet Start SERVICE_AUTO_START

Write-Output 'winkube-step: done'
Stop-Transcript | Out-Null
