$ErrorActionPreference = 'Continue'
Write-Output 'winkube-step: kubeadm-reset'
if (Test-Path C:\k\kubeadm.exe) { & C:\k\kubeadm.exe reset --force --cri-socket 'npipe:////./pipe/containerd-containerd' }
Write-Output 'winkube-step: services'
$nssm = "$env:ProgramFiles\nssm\nssm.exe"
if (Get-Service -Name kubelet -ErrorAction SilentlyContinue) { Stop-Service -Name kubelet -Force; & $nssm remove kubelet confirm }
if (Get-Service -Name containerd -ErrorAction SilentlyContinue) { Stop-Service -Name containerd -Force; & "$env:ProgramFiles\containerd\containerd.exe" --unregister-service }
Remove-NetFirewallRule -Name kubelet -ErrorAction SilentlyContinue
Write-Output 'winkube-step: files'
Remove-Item -Recurse -Force -ErrorAction SilentlyContinue C:\var\lib\kubelet, C:\etc\kubernetes, C:\var\log\kubelet, C:\k\kubelet.exe, C:\k\kubeadm.exe, C:\k\StartKubelet.ps1, "$env:ProgramFiles\containerd"
Write-Output 'winkube-step: done'
