package nodelogs

// Item is one file of the collection and the command whose output it is.
type Item struct {
	File    string
	Command string
}

// Plan is what is collected from a node of the OS: the items of CAPZ's log
// collector (kubernetes-sigs/cluster-api-provider-azure @69ec3a40,
// test/e2e/azure_logcollector.go: linuxLogs, windowsInfo, windowsK8sLogs,
// windowsNetworkLogs, windowsCrashDumpLogs) under its file names, and
// kube-proxy's log, which CAPZ reads through the workload API server; a
// node that never joined has none to ask. The boot agent's log comes first:
// it is the one that says why a machine never joined.
//
// Commands are one simple line each where CAPZ's guard a missing file with
// an if or wait for cloud-init to finish: a missing file is then the
// command's error, which the index records, and a machine whose cloud-init
// hangs is not waited for. CAPZ's crash-dump archive (tar on the node, then
// sftp) is left out: it writes to the node, and winkube copies no files.
//
// Windows commands are PowerShell, the SSH shell of CAPZ's Windows images
// and the shell of Azure's RunPowerShellScript; Linux ones run in the login
// shell or as RunShellScript.
func Plan(windows bool) []Item {
	if windows {
		return windowsPlan
	}
	return linuxPlan
}

const cloudbaseLogs = `C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\`

var windowsPlan = []Item{
	// windowsInfo
	{"cloudbase-init.log", `Get-Content '` + cloudbaseLogs + `cloudbase-init.log'`},
	{"cloudbase-init-unattend.log", `Get-Content '` + cloudbaseLogs + `cloudbase-init-unattend.log'`},
	{"services.log", "Get-Service"},
	{"reboots.log", `Get-WinEvent -ErrorAction Ignore -FilterHashtable @{logname = 'System'; id = 1074, 1076, 2004, 6005, 6006, 6008 } | Select-Object -Property TimeCreated, Id, LevelDisplayName, Message | Format-Table -Wrap -Autosize`},
	{"scm.log", `Get-WinEvent -FilterHashtable @{logname = 'System'; ProviderName = 'Service Control Manager' } | Select-Object -Property TimeCreated, Id, LevelDisplayName, Message | Format-Table -Wrap -Autosize`},
	{"pagefile.log", "Get-CimInstance win32_pagefileusage | Format-List *"},
	// windowsK8sLogs. CAPZ prints every file of C:\var\log\kubelet; the
	// images' kubelet service writes kubelet.log through kube-log-runner
	// (sc) or kubelet.err.log (nssm) there (kubernetes-sigs/image-builder
	// @ae63061e, images/capi/ansible/windows/roles/kubernetes/tasks/sc.yml
	// and nssm.yml), so the listing and both files are collected.
	{"kubelet-dir.log", `Get-ChildItem 'C:\var\log\kubelet'`},
	{"kubelet.log", `Get-Content 'C:\var\log\kubelet\kubelet.log'`},
	{"kubelet.err.log", `Get-Content 'C:\var\log\kubelet\kubelet.err.log'`},
	{"kubelet-version.txt", "kubelet.exe --version"},
	{"containerd.log", `Get-Content 'C:\var\log\containerd\containerd.log'`},
	{"containerd-containers.log", "ctr.exe -n k8s.io containers list"},
	{"containerd-tasks.log", "ctr.exe -n k8s.io tasks list"},
	{"containers-hcs.log", "hcsdiag list"},
	{"hyperv-operation.log", "Get-WinEvent -LogName Microsoft-Windows-Hyper-V-Compute-Operational | Select-Object -Property TimeCreated, Id, LevelDisplayName, Message | Sort-Object TimeCreated | Format-Table -Wrap -Autosize"},
	{"cni.log", `Get-Content 'C:\cni.log'`},
	// CAPZ's kube-proxy for Windows is the HostProcess DaemonSet
	// kube-proxy-windows with container kube-proxy
	// (templates/addons/windows/calico/kube-proxy-windows.yaml), logging
	// to its stdout: the kubelet keeps that in
	// <pod logs>\<namespace>_<pod>_<uid>\<container>\<restarts>.log
	// (kubernetes/kubernetes pkg/kubelet/kuberuntime/helpers.go,
	// BuildContainerLogsDirectory).
	{"kube-proxy.log", `Get-Content 'C:\var\log\pods\kube-system_kube-proxy-*\kube-proxy\*.log'`},
	// windowsNetworkLogs; the two JSON views keep winkube's earlier names.
	{"network.log", "Get-HnsNetwork | Select Name, Type, Id, AddressPrefix | Format-Table -Wrap -Autosize"},
	{"hns-networks.json", "Get-HnsNetwork | ConvertTo-Json -Depth 20"},
	{"network-individual-detailed.log", "Get-HnsNetwork | % { Get-HnsNetwork -Id $_.ID -Detailed } | ConvertTo-Json -Depth 20"},
	{"hnsendpoints.log", "Get-HnsEndpoint | Select IpAddress, MacAddress, IsRemoteEndpoint, State"},
	{"hns-endpoints.json", "Get-HnsEndpoint | ConvertTo-Json -Depth 20"},
	{"hnsendpolicy-detailed.log", "Get-HnsPolicyList | ConvertTo-Json -Depth 20"},
	{"ipconfig.log", "ipconfig /allcompartments /all"},
	{"ips.log", "Get-NetIPAddress -IncludeAllCompartments"},
	{"interfaces.log", "Get-NetIPInterface -IncludeAllCompartments"},
	{"hnsdiag.txt", "hnsdiag list all -d"},
	// windowsCrashDumpLogs: the listing only.
	{"dir-localdumps.log", `Get-ChildItem 'C:\localdumps' -Recurse`},
}

var linuxPlan = []Item{
	{"cloud-init-output.log", "sudo cat /var/log/cloud-init-output.log"},
	{"cloud-init.log", "sudo cat /var/log/cloud-init.log"},
	{"sentinel-file-dir.txt", "ls -la /run/cluster-api/"},
	{"kubelet.log", "sudo journalctl --no-pager --output=short-precise -u kubelet.service"},
	{"kubelet-version.txt", "kubelet --version"},
	{"containerd.log", "sudo journalctl --no-pager --output=short-precise -u containerd.service"},
	{"cni.log", "sudo cat /var/log/calico/cni/cni.log"},
	// kube-proxy's and (on control-plane machines) kube-apiserver's
	// container logs, from the kubelet's pod log folders (see the Windows
	// plan); CAPZ reads kube-apiserver's through crictl, which needs jq.
	{"kube-proxy.log", "sudo cat /var/log/pods/kube-system_kube-proxy-*/kube-proxy/*.log"},
	{"kube-apiserver.log", "sudo cat /var/log/pods/kube-system_kube-apiserver-*/kube-apiserver/*.log"},
	{"journal.log", "sudo journalctl --no-pager --output=short-precise"},
	{"kern.log", "sudo journalctl --no-pager --output=short-precise -k"},
	{"ignition.log", "sudo journalctl --no-pager --output=short-precise -at ignition"},
}
