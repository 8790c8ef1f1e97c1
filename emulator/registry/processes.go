package registry

// CalicoVersion is the Calico release the local world publishes: v3.30.7,
// the release tigera/operator v1.38.16 installs (config/calico_versions.yml).
const CalicoVersion = "v3.30.7"

// The upstream images' processes, from their Dockerfiles. Only what the
// machine runtime models is listed: the files its programs use.
var (
	// kubernetes-sigs/sig-windows-tools hostprocess/calico/kube-proxy/Dockerfile
	// (bed2bcf8907c83be3065ecce94ff601a3cf665a9): the HostProcess base image,
	// ENTRYPOINT ["PowerShell"], no CMD, no WORKDIR in the final stage.
	kubeProxyWindows = Process{
		Entrypoint: []string{"PowerShell"},
		Env:        []string{`PATH=C:\Windows\system32;C:\Windows;C:\WINDOWS\System32\WindowsPowerShell\v1.0\;`},
		Files:      []string{"/kube-proxy/start.ps1", "/kube-proxy/kube-proxy.exe", "/kube-proxy/hns.psm1"},
		Source:     "kubernetes-sigs/sig-windows-tools hostprocess/calico/kube-proxy/Dockerfile@bed2bcf8",
	}
	// projectcalico/calico node/Dockerfile-windows at v3.30.7
	// (74485ea40911c4868ae83ddb5da489c1533d1dba; file 27cafab3).
	calicoNodeWindows = Process{
		Entrypoint: []string{"powershell"},
		WorkingDir: "/CalicoWindows",
		Env:        []string{`PATH=C:\Windows\system32;C:\Windows;C:\CalicoWindows;C:\Windows\System32;C:\Windows;C:\Windows\System32\WindowsPowerShell\v1.0;C:\Program Files\PowerShell`},
		Files: []string{"/CalicoWindows/calico-node.exe", "/CalicoWindows/felix-service.ps1", "/CalicoWindows/node-service.ps1",
			"/CalicoWindows/config.ps1", "/CalicoWindows/confd/confd-service.ps1", "/CalicoWindows/libs/calico/calico.psm1",
			"/CalicoWindows/libs/hns/hns.psm1", "/nssm.exe", "/uninstall-calico.ps1"},
		Source: "projectcalico/calico node/Dockerfile-windows@v3.30.7",
	}
	// projectcalico/calico node/Dockerfile.amd64 at v3.30.7: runit
	// starts calico-node's startup, then Felix; CMD ["start_runit"].
	calicoNodeLinux = Process{
		Cmd:    []string{"start_runit"},
		Files:  []string{"/usr/sbin/start_runit", "/bin/calico-node"},
		Source: "projectcalico/calico node/Dockerfile.amd64@v3.30.7",
	}
	// projectcalico/calico cni-plugin/Dockerfile-windows at v3.30.7: no
	// ENTRYPOINT, CMD ["/opt/cni/bin/install.exe"], WORKDIR /opt/cni/bin.
	calicoCNIWindows = Process{
		Cmd:        []string{"/opt/cni/bin/install.exe"},
		WorkingDir: "/opt/cni/bin",
		Env:        []string{`PATH=C:\Windows\system32;C:\Windows;/opt/cni/bin`},
		Files:      []string{"/opt/cni/bin/install.exe", "/opt/cni/bin/calico.exe", "/opt/cni/bin/calico-ipam.exe", "/opt/cni/bin/flannel.exe"},
		Source:     "projectcalico/calico cni-plugin/Dockerfile-windows@v3.30.7",
	}
	// projectcalico/calico cni-plugin/Dockerfile (Linux) at v3.30.7: the
	// install program and the plugins under /opt/cni/bin, CMD install.
	calicoCNILinux = Process{
		Cmd:        []string{"/opt/cni/bin/install"},
		WorkingDir: "/opt/cni/bin",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin"},
		Files:      []string{"/opt/cni/bin/install", "/opt/cni/bin/calico", "/opt/cni/bin/calico-ipam"},
		Source:     "projectcalico/calico cni-plugin/Dockerfile@v3.30.7",
	}
	// flannel-io/flannel images/Dockerfile (v0.25.6): alpine (busybox cp),
	// ENTRYPOINT ["/opt/bin/flanneld"].
	flannelLinux = Process{
		Entrypoint: []string{"/opt/bin/flanneld"},
		Files:      []string{"/opt/bin/flanneld", "/bin/cp", "/bin/sh"},
		Source:     "flannel-io/flannel images/Dockerfile@v0.25.6",
	}
	// kubernetes-sigs/cloud-provider-azure cloud-node-manager-windows.Dockerfile
	// (44dcaefbd432ec49da7892f1e9d2f051832d61cf): ENTRYPOINT ["/cloud-node-manager.exe"].
	cloudNodeManagerWindows = Process{
		Entrypoint: []string{"/cloud-node-manager.exe"},
		Files:      []string{"/cloud-node-manager.exe"},
		Source:     "kubernetes-sigs/cloud-provider-azure cloud-node-manager-windows.Dockerfile@44dcaefb",
	}
	// kubernetes-sigs/sig-windows-tools hostprocess/csi-proxy/Dockerfile.windows
	// (3ad1e4a3df254989ea556b2dd9aa40b5709d2a93; PATH dcc77000).
	csiProxy = Process{
		Entrypoint: []string{"csi-proxy.exe", "-v", "4"},
		Env:        []string{`PATH=C:\Windows\system32;C:\Windows;C:\WINDOWS\System32\WindowsPowerShell\v1.0\;C:\Windows\System32\wbem;`},
		Files:      []string{"/csi-proxy.exe"},
		Source:     "kubernetes-sigs/sig-windows-tools hostprocess/csi-proxy/Dockerfile.windows@3ad1e4a3",
	}
	// kubernetes-sigs/azuredisk-csi-driver pkg/azurediskplugin/Dockerfile
	// at v1.34.5 (fb4981e375c55d93dab0cfcfd0b4644921d095b7): debian-base
	// with the mount and filesystem tools, ENTRYPOINT ["/azurediskplugin"].
	azureDiskLinux = Process{
		Entrypoint: []string{"/azurediskplugin"},
		Files:      []string{"/azurediskplugin"},
		Source:     "kubernetes-sigs/azuredisk-csi-driver pkg/azurediskplugin/Dockerfile@fb4981e3",
	}
	// pkg/azurediskplugin/Windows.Dockerfile at v1.34.5: nanoserver,
	// ENTRYPOINT ["/azurediskplugin.exe"]; the image the chart's
	// csi-proxy (non-HostProcess) DaemonSet runs.
	azureDiskWindows = Process{
		Entrypoint: []string{"/azurediskplugin.exe"},
		Files:      []string{"/azurediskplugin.exe"},
		Source:     "kubernetes-sigs/azuredisk-csi-driver pkg/azurediskplugin/Windows.Dockerfile@fb4981e3",
	}
	// pkg/azurediskplugin/WindowsHostProcess.Dockerfile at v1.34.5: the
	// HostProcess base image, the program at the root, the PATH below,
	// ENTRYPOINT ["/azurediskplugin.exe"]. The chart's HostProcess
	// DaemonSet names the program as its command (azurediskplugin.exe) and
	// runs powershell.exe from the host in its init container.
	azureDiskHostProcess = Process{
		Entrypoint: []string{"/azurediskplugin.exe"},
		Env:        []string{`PATH=C:\Windows\system32;C:\Windows;C:\WINDOWS\System32\WindowsPowerShell\v1.0\;`},
		Files:      []string{"/azurediskplugin.exe"},
		Source:     "kubernetes-sigs/azuredisk-csi-driver pkg/azurediskplugin/WindowsHostProcess.Dockerfile@fb4981e3",
	}
	// kubernetes-csi sidecars: distroless static images whose Dockerfile
	// copies the one program and makes it the ENTRYPOINT.
	csiProvisioner = Process{
		Entrypoint: []string{"/csi-provisioner"},
		Files:      []string{"/csi-provisioner"},
		Source:     "kubernetes-csi/external-provisioner Dockerfile@v6.3.0 (34c6fc21)",
	}
	csiAttacher = Process{
		Entrypoint: []string{"/csi-attacher"},
		Files:      []string{"/csi-attacher"},
		Source:     "kubernetes-csi/external-attacher Dockerfile@v4.12.0 (f395fb4f)",
	}
	csiResizer = Process{
		Entrypoint: []string{"/csi-resizer"},
		Files:      []string{"/csi-resizer"},
		Source:     "kubernetes-csi/external-resizer Dockerfile@v2.2.0 (314a8de6)",
	}
	csiSnapshotter = Process{
		Entrypoint: []string{"/csi-snapshotter"},
		Files:      []string{"/csi-snapshotter"},
		Source:     "kubernetes-csi/external-snapshotter cmd/csi-snapshotter/Dockerfile@v8.6.0 (78e32cd8)",
	}
	csiLivenessProbeLinux = Process{
		Entrypoint: []string{"/livenessprobe"},
		Files:      []string{"/livenessprobe"},
		Source:     "kubernetes-csi/livenessprobe Dockerfile@v2.19.0 (d2d15a5e)",
	}
	// Dockerfile.Windows: nanoserver, the program at the root,
	// USER ContainerAdministrator.
	csiLivenessProbeWindows = Process{
		Entrypoint: []string{"/livenessprobe.exe"},
		Files:      []string{"/livenessprobe.exe"},
		Source:     "kubernetes-csi/livenessprobe Dockerfile.Windows@v2.19.0 (d2d15a5e)",
	}
	csiNodeDriverRegistrarLinux = Process{
		Entrypoint: []string{"/csi-node-driver-registrar"},
		Files:      []string{"/csi-node-driver-registrar"},
		Source:     "kubernetes-csi/node-driver-registrar Dockerfile@v2.17.0 (c5794c45)",
	}
	// Dockerfile.Windows: nanoserver, /csi-node-driver-registrar.exe;
	// the chart's HostProcess DaemonSet runs it by the bare name
	// csi-node-driver-registrar.exe, found at the sandbox's root.
	csiNodeDriverRegistrarWindows = Process{
		Entrypoint: []string{"/csi-node-driver-registrar.exe"},
		Files:      []string{"/csi-node-driver-registrar.exe"},
		Source:     "kubernetes-csi/node-driver-registrar Dockerfile.Windows@v2.17.0 (c5794c45)",
	}
)
