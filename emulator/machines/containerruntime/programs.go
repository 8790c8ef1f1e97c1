package containerruntime

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// systemPrograms are the host's own programs, by file name.
var systemPrograms map[string]func(*Proc) Outcome

// imagePrograms are the upstream add-ons' programs and scripts, by their
// path in the image (or, for a script a ConfigMap mounts, in the
// container's sandbox), lower-case.
var imagePrograms map[string]func(*Proc) Outcome

func init() {
	systemPrograms = map[string]func(*Proc) Outcome{
		"powershell.exe": powershell,
		"cmd.exe":        cmd,
	}
	imagePrograms = map[string]func(*Proc) Outcome{
		// sigwindowstools/kube-proxy:<v>-calico-hostprocess
		// (kubernetes-sigs/sig-windows-tools hostprocess/calico/kube-proxy/start.ps1, e35b2e16).
		"/kube-proxy/start.ps1": kubeProxyStart,
		// calico/node-windows (projectcalico/calico node/windows-packaging/CalicoWindows, v3.30.7 74485ea4).
		"/calicowindows/node-service.ps1":  calicoNodeService,
		"/calicowindows/felix-service.ps1": calicoFelixService,
		"/uninstall-calico.ps1":            func(*Proc) Outcome { return Outcome{State: Runs} },
		// calico/cni-windows and calico/cni (cni-plugin/pkg/install/install.go, v3.30.7).
		"/opt/cni/bin/install.exe": calicoInstall,
		"/opt/cni/bin/install":     calicoInstall,
		// cloud-provider-azure's chart: the cloud-provider-azure-scripts
		// ConfigMap's start.ps1 mounted at /scripts, and the image's
		// program (helm/cloud-provider-azure/templates/cloud-provider-azure.yaml, 260618b8).
		"/scripts/start.ps1":      cloudNodeManagerStart,
		"/cloud-node-manager.exe": cloudNodeManager,
		// calico/node on Linux: its startup, then Felix (node/pkg/lifecycle/startup).
		"/usr/sbin/start_runit": calicoNodeLinux,
		// busybox's cp in flannel's images (Documentation/kube-flannel.yml's install-cni steps).
		"/bin/cp": cp,
	}
}

// inClusterServer is where client-go's in-cluster configuration sends a
// pod's requests: KUBERNETES_SERVICE_HOST and _PORT, which the kubelet
// sets to the kubernetes Service's ClusterIP unless the pod sets them.
func (p *Proc) inClusterServer() (string, error) {
	host, port := p.Env["KUBERNETES_SERVICE_HOST"], p.Env["KUBERNETES_SERVICE_PORT"]
	if host == "" || port == "" {
		return "", fmt.Errorf("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")
	}
	return net.JoinHostPort(host, port), nil
}

// psNotRecognized is PowerShell's error for a name that is no command,
// function or script.
func psNotRecognized(name string) string {
	return fmt.Sprintf("%s : The term '%s' is not recognized as the name of a cmdlet, function, script file, or operable program. Check the spelling of the name, or if a path was included, verify that the path is correct and try again.", name, name)
}

// powershell runs a script named on its command line (powershell.exe
// <script> or -File <script>), relative to the working directory.
func powershell(p *Proc) Outcome {
	if o, ok := psOutputAndExit(p); ok {
		return o
	}
	if o, ok := psStatements(p); ok {
		return o
	}
	script, file := "", false
	for i := 0; i < len(p.Args); i++ {
		a := p.Args[i]
		switch strings.ToLower(a) {
		case "-noprofile", "-noninteractive", "-nologo":
			continue
		case "-executionpolicy":
			i++
			continue
		case "-file":
			file = true
			continue
		case "-command", "-c", "/c":
			continue
		}
		script = strings.Trim(a, `"'`)
		break
	}
	if !strings.HasSuffix(strings.ToLower(script), ".ps1") {
		return Outcome{State: Runs} // a command, not a script: not modelled
	}
	full := p.View.norm(script, p.Cwd)
	// As a command (no -File), PowerShell runs a script only by a path:
	// it does not look in the working directory for a bare name.
	bare := !strings.ContainsAny(script, `\/`)
	if !p.View.Exists(full, p.Cwd) || (bare && !file) {
		if file {
			return exits(1, "The argument '%s' to the -File parameter does not exist. Provide the path to an existing '.ps1' file as an argument to the -File parameter.", script)
		}
		return exits(1, "%s", psNotRecognized(script))
	}
	if m, ok := imagePrograms[strings.ToLower(p.imagePath(full))]; ok {
		return m(p)
	}
	return Outcome{State: Runs}
}

// psStatements runs a -Command of several statements (a; b): Copy-Item
// -Path <file> -Destination <file>, and the call operator on a script
// (& <script>), which runs as powershell <script> would. ok is false for
// any other command line.
func psStatements(p *Proc) (Outcome, bool) {
	if len(p.Args) != 2 || !strings.EqualFold(p.Args[0], "-Command") || !strings.Contains(p.Args[1], ";") {
		return Outcome{}, false
	}
	for _, stmt := range strings.Split(p.Args[1], ";") {
		f := strings.Fields(stmt)
		switch {
		case len(f) == 0:
		case strings.EqualFold(f[0], "Copy-Item"):
			var src, dst string
			for i := 1; i+1 < len(f); i++ {
				switch strings.ToLower(f[i]) {
				case "-path":
					src = f[i+1]
				case "-destination":
					dst = f[i+1]
				}
			}
			data, err := p.View.ReadFile(src, p.Cwd)
			if err != nil {
				return exits(1, "Copy-Item : Cannot find path '%s' because it does not exist.", src), true
			}
			if _, err := p.View.WriteFile(dst, p.Cwd, data); err != nil {
				return exits(1, "Copy-Item : %v", err), true
			}
		case f[0] == "&" && len(f) == 2:
			p.Args = []string{f[1]}
			return powershell(p), true
		default:
			return Outcome{State: Runs}, true // not modelled
		}
	}
	return Outcome{State: Runs}, true
}

// need is a script's dot-source or Import-Module of a file relative to
// the working directory; PowerShell's error when it is not there.
func (p *Proc) need(rel string, module bool) *Outcome {
	if p.View.Exists(rel, p.Cwd) {
		return nil
	}
	if module {
		o := exits(1, "Import-Module : The specified module '%s' was not loaded because no valid module file was found in any module directory. (working directory %s)", rel, p.Cwd)
		return &o
	}
	o := exits(1, ". : %s (working directory %s)", strings.TrimPrefix(psNotRecognized(rel), rel+" : "), p.Cwd)
	return &o
}

// kubeProxyStart is sig-windows-tools' start.ps1 for the Calico
// kube-proxy image: it imports .\hns.psm1, rewrites the kubeconfig the
// kube-proxy ConfigMap mounts at /var/lib/kube-proxy to sandbox paths,
// waits for the HNS network "Calico" (and its Calico_ep endpoint on
// overlay) and runs kube-proxy in kernelspace mode.
func kubeProxyStart(p *Proc) Outcome {
	if o := p.need(`.\hns.psm1`, true); o != nil {
		return *o
	}
	p.Logf("Running kub-proxy service.")
	kc := p.Sandbox + `\var\lib\kube-proxy\kubeconfig.conf`
	data, err := p.View.ReadFile(kc, p.Cwd)
	if err != nil {
		return exits(1, "Get-Content : Cannot find path '%s' because it does not exist.", kc)
	}
	// The script looks for the network every second (Start-Sleep 1,
	// sig-windows-tools hostprocess/calico/kube-proxy/start.ps1 at
	// 10e8dc7362a13211aa8722175f734a9e3a0b97b3).
	const network = "Calico"
	if p.Node.HNS == nil {
		return waitsEvery(time.Second, "Waiting for HNS network %s to be created...", network)
	}
	if _, ok := p.Node.HNS.Network(network); !ok {
		return waitsEvery(time.Second, "Waiting for HNS network %s to be created...", network)
	}
	p.Logf("HNS network %s found.", network)
	server := kubeconfigServer(string(data))
	if server == "" {
		return exits(1, "kube-proxy: invalid configuration: no server found in %s", kc)
	}
	if err := p.dial(server); err != nil {
		if o, ok := blocked(err); ok {
			return o
		}
		return exits(1, "kube-proxy: failed to retrieve node info: Get \"https://%s/api/v1/nodes/%s\": %v", server, p.Node.Name, err)
	}
	return Outcome{State: Runs}
}

var (
	serverLine = regexp.MustCompile(`(?m)^\s*server:\s*https?://(\S+?)/?\s*$`)
	tokenLine  = regexp.MustCompile(`(?m)^\s*tokenFile:\s*(\S+)\s*$`)
	caLine     = regexp.MustCompile(`(?m)^\s*certificate-authority:\s*(\S+)\s*$`)
)

func kubeconfigServer(kc string) string {
	m := serverLine.FindStringSubmatch(kc)
	if m == nil {
		return ""
	}
	return m[1]
}

// hostPath is libcalico-go's winutils.GetHostPath: in a HostProcess
// container a path is taken under the sandbox mount point.
func (p *Proc) hostPath(path string) string {
	if p.Sandbox == "" {
		return path
	}
	path = strings.TrimPrefix(strings.TrimPrefix(path, "c:"), "C:")
	path = strings.TrimPrefix(path, sandboxVarPS)
	return p.Sandbox + strings.ReplaceAll(path, "/", `\`)
}

func envBool(v string, def bool) bool {
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return def
}

// calicoInstall is Calico's install-cni (cni-plugin/pkg/install): as a
// pod it asks the API server for the CNI plugin's token, copies the CNI
// binaries to /host/opt/cni/bin and writes the CNI configuration and its
// kubeconfig to /host/etc/cni/net.d, where the volume mounts must put
// the host's directories; with SLEEP (default true) it then watches the
// etcd certificate and never ends.
func calicoInstall(p *Proc) Outcome {
	token := p.hostPath(ServiceAccountDir + "/token")
	if p.View.Exists(token, p.Cwd) {
		p.Logf("Running as a Kubernetes pod")
		ns, _ := p.View.ReadFile(p.hostPath(ServiceAccountDir+"/namespace"), p.Cwd)
		server, err := p.inClusterServer()
		if err == nil {
			if derr := p.dial(server); derr != nil {
				if o, ok := blocked(derr); ok {
					return o
				}
				err = fmt.Errorf("Post \"https://%s/api/v1/namespaces/%s/serviceaccounts/calico-cni-plugin/token\": %v", server, ns, derr)
			}
		}
		if err != nil {
			return exits(1, "Error installing CNI plugin: %v", err)
		}
	}
	bins := []string{"calico", "calico-ipam"}
	ext := ""
	if p.Node.OS == "windows" {
		ext = ".exe"
	}
	for _, b := range bins {
		_, _ = p.View.WriteFile(p.hostPath("/host/opt/cni/bin/"+b+ext), p.Cwd, []byte("calico CNI plugin (simulated)"))
	}
	p.Logf("Wrote Calico CNI binaries to %s", p.hostPath("/host/opt/cni/bin"))
	conf := p.Env["CNI_NETWORK_CONFIG"]
	if conf == "" {
		conf = `{"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": [{"type": "calico", "nodename": "__KUBERNETES_NODE_NAME__", "mtu": __CNI_MTU__}]}`
	} else {
		p.Logf("Using CNI config template from CNI_NETWORK_CONFIG environment variable.")
	}
	netDir := p.Env["CNI_NET_DIR"]
	if netDir == "" {
		netDir = "/etc/cni/net.d"
	}
	kubeconfig := netDir + "/calico-kubeconfig"
	if p.Node.OS == "windows" {
		kubeconfig = "c:" + kubeconfig
	}
	subst := map[string]string{
		"__KUBERNETES_NODE_NAME__": p.Env["KUBERNETES_NODE_NAME"], "__CNI_MTU__": or(p.Env["CNI_MTU"], "1500"),
		"__KUBECONFIG_FILEPATH__": kubeconfig, "__NODENAME_FILE__": or(p.Env["CALICO_NODENAME_FILE"], "c:/var/run/calico/nodename"),
		"__DSR_SUPPORT__": "true", "__KUBERNETES_SERVICE_HOST__": p.Env["KUBERNETES_SERVICE_HOST"], "__KUBERNETES_SERVICE_PORT__": p.Env["KUBERNETES_SERVICE_PORT"],
	}
	for k, v := range subst {
		conf = strings.ReplaceAll(conf, k, v)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(conf), &js); err != nil {
		return exits(1, "%s is not a valid json object\nerror: %s", conf, err)
	}
	name := or(p.Env["CNI_CONF_NAME"], "10-calico.conflist")
	target := p.hostPath("/host/etc/cni/net.d/" + name)
	if _, err := p.View.WriteFile(p.hostPath("/host/etc/cni/net.d/calico-kubeconfig"), p.Cwd, []byte("# calico-kubeconfig (simulated)\n")); err != nil {
		return exits(1, "Failed to write the CNI plugin's kubeconfig: %v", err)
	}
	if _, err := p.View.WriteFile(target, p.Cwd, []byte(conf)); err != nil {
		return exits(1, "Failed to write CNI network config %s: %v", target, err)
	}
	p.Logf("Created %s", target)
	if !envBool(p.Env["SLEEP"], true) {
		return Outcome{State: Runs}
	}
	p.Logf("Done configuring CNI.  Sleep= true")
	cert := p.hostPath(or(p.Env["TLS_ASSETS_DIR"], "/calico-secrets") + "/etcd-cert")
	if p.View.Exists(cert, p.Cwd) {
		return waits("watching %s for changes (SLEEP is true: install-cni never ends)", cert)
	}
	notFound := "no such file or directory"
	if p.Node.OS == "windows" {
		notFound = "The system cannot find the file specified."
	}
	return exits(1, "%s: %s (SLEEP is true: after writing the configuration install-cni watches the etcd certificate)", cert, notFound)
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// calicoNodeService is node-service.ps1: it dot-sources .\config.ps1,
// imports Calico's modules, and loops on `calico-node.exe -startup`,
// which reads the cluster from the API server and creates the HNS
// network "Calico" (Overlay for VXLAN, L2Bridge for BGP).
func calicoNodeService(p *Proc) Outcome {
	for _, f := range []struct {
		rel    string
		module bool
	}{{`.\config.ps1`, false}, {`.\libs\calico\calico.psm1`, true}, {`.\libs\hns\hns.psm1`, true}} {
		if o := p.need(f.rel, f.module); o != nil {
			return *o
		}
	}
	backend := or(p.Env["CALICO_NETWORKING_BACKEND"], "vxlan")
	p.Logf("Calico %s networking enabled.", backend)
	server, err := p.inClusterServer()
	if err == nil {
		err = p.dial(server)
	}
	if o, ok := blocked(err); ok {
		return o
	}
	if err != nil {
		return waits("Calico node initialisation failed, will retry...: %v", err)
	}
	switch backend {
	case "vxlan":
		if _, err := strconv.Atoi(or(p.Env["VXLAN_VNI"], "4096")); err != nil {
			return waits("Calico node initialisation failed, will retry...: invalid VXLAN_VNI %q", p.Env["VXLAN_VNI"])
		}
		p.Node.HNS.CreateNetwork("Calico", "Overlay")
	case "windows-bgp":
		p.Node.HNS.CreateNetwork("Calico", "L2Bridge")
	case "none":
	default:
		return waits("Calico node initialisation failed, will retry...: invalid backend configuration %q", backend)
	}
	p.Logf("Calico node initialisation succeeded; monitoring kubelet for restarts...")
	return Outcome{State: Runs}
}

// calicoFelixService is felix-service.ps1: after .\config.ps1 it waits
// for node-service.ps1's initialisation, then runs Felix, which watches
// the datastore through the API server.
func calicoFelixService(p *Proc) Outcome {
	if o := p.need(`.\config.ps1`, false); o != nil {
		return *o
	}
	// Wait-ForCalicoInit looks every second (Start-Sleep 1, projectcalico/calico
	// node/windows-packaging/CalicoWindows/libs/calico/calico.psm1 at
	// dce0697f0b6ba594978ec8d1b24c394f25db532e).
	if p.Node.HNS == nil {
		return waitsEvery(time.Second, "Waiting for Calico initialisation to finish...")
	}
	if _, ok := p.Node.HNS.Network("Calico"); !ok && or(p.Env["CALICO_NETWORKING_BACKEND"], "vxlan") != "none" {
		return waitsEvery(time.Second, "Waiting for Calico initialisation to finish...")
	}
	server, err := p.inClusterServer()
	if err == nil {
		err = p.dial(server)
	}
	if o, ok := blocked(err); ok {
		return o
	}
	if err != nil {
		return waits("[felix-service.ps1] Starting calico felix process: felix exited: %v", err)
	}
	// Felix's Windows data plane reads static-rules.json beside the
	// calico-node.exe it runs as (the working directory here) and panics
	// on one it cannot use; felix-service.ps1 then starts it again
	// (felix/dataplane/windows/policysets/static_rules.go, v3.30.7).
	if data, err := p.View.ReadFile(`.\static-rules.json`, p.Cwd); err == nil {
		var rules struct {
			Provider string
			Rules    []struct {
				Rule struct {
					ID              string `json:"Id"`
					Action          string
					RemoteAddresses string
					RemotePorts     string
				}
			}
		}
		if err := json.Unmarshal(data, &rules); err != nil {
			return waits("[felix-service.ps1] Starting calico felix process: Failed to unmarshal static rules file: %v", err)
		}
		if rules.Provider == "" {
			return waits("[felix-service.ps1] Starting calico felix process: Provider is not specified")
		}
		for _, r := range rules.Rules {
			p.Logf("static rule %s: %s %s port %s", r.Rule.ID, r.Rule.Action, r.Rule.RemoteAddresses, r.Rule.RemotePorts)
		}
	}
	return Outcome{State: Runs}
}

// cloudNodeManagerStart is the chart's start.ps1: it rewrites the
// kube-proxy kubeconfig mounted at /var/lib/cpaw so that its token and
// CA paths point into the sandbox (kubernetes/kubernetes#104562), then
// runs cloud-node-manager.exe with it.
func cloudNodeManagerStart(p *Proc) Outcome {
	kc := p.Sandbox + `\var\lib\cpaw\kubeconfig.conf`
	data, err := p.View.ReadFile(kc, p.Cwd)
	if err != nil {
		return exits(1, "Get-Content : Cannot find path '%s' because it does not exist.", kc)
	}
	rewritten := strings.ReplaceAll(string(data), "/var", strings.ReplaceAll(p.Sandbox, `\`, "/")+"/var")
	out := p.Sandbox + `\var\lib\cpaw\kubeconfig-cnm.conf`
	if _, err := p.View.WriteFile(out, p.Cwd, []byte(rewritten)); err != nil {
		return exits(1, "Set-Content : %v", err)
	}
	exe := p.Sandbox + `\cloud-node-manager.exe`
	if !p.View.Exists(exe, p.Cwd) {
		return exits(1, "%s", psNotRecognized(exe))
	}
	p.Logf("Running %s --node-name=%s --use-instance-metadata=true --kubeconfig=%s", exe, p.Env["NODE_NAME"], out)
	p.Args = []string{"--node-name=" + p.Env["NODE_NAME"], "--use-instance-metadata=true", "--kubeconfig=" + out}
	return cloudNodeManager(p)
}

// cloudNodeManager is azure-cloud-node-manager: it reaches the API
// server through its --kubeconfig (or in-cluster) and reads the token
// and CA files it names, as client-go does.
func cloudNodeManager(p *Proc) Outcome {
	kcPath, nodeName := "", ""
	for _, a := range p.Args {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			kcPath = v
		}
		if v, ok := strings.CutPrefix(a, "--node-name="); ok {
			nodeName = v
		}
	}
	if nodeName == "" {
		return exits(1, "cloud-node-manager: --node-name is empty")
	}
	notFound := "no such file or directory"
	if p.Node.OS == "windows" {
		notFound = "The system cannot find the path specified."
	}
	server := ""
	files := []string{ServiceAccountDir + "/token", ServiceAccountDir + "/ca.crt"}
	if kcPath != "" {
		data, err := p.View.ReadFile(kcPath, p.Cwd)
		if err != nil {
			return exits(1, "error building kubeconfig: stat %s: %s", kcPath, notFound)
		}
		server = kubeconfigServer(string(data))
		files = nil
		for _, re := range []*regexp.Regexp{tokenLine, caLine} {
			if m := re.FindStringSubmatch(string(data)); m != nil {
				files = append(files, m[1])
			}
		}
	} else {
		s, err := p.inClusterServer()
		if err != nil {
			return exits(1, "cloud-node-manager: %v", err)
		}
		server = s
	}
	for _, f := range files {
		if !p.View.Exists(f, p.Cwd) {
			return exits(1, "cloud-node-manager: failed to create the client: open %s: %s", f, notFound)
		}
	}
	if err := p.dial(server); err != nil {
		if o, ok := blocked(err); ok {
			return o
		}
		return exits(1, "cloud-node-manager: failed to get node %s: %v", nodeName, err)
	}
	return Outcome{State: Runs}
}

// calicoNodeLinux is calico-node's startup under runit: it reads the
// cluster from the API server (in-cluster, through the kubernetes
// Service) and writes the node's name to /var/lib/calico/nodename, which
// the Calico CNI plugin reads for every pod; then Felix runs.
func calicoNodeLinux(p *Proc) Outcome {
	name := p.Env["NODENAME"]
	if name == "" {
		return exits(1, "Unable to determine the node name: NODENAME is not set")
	}
	server, err := p.inClusterServer()
	if err == nil {
		err = p.dial(server)
	}
	if o, ok := blocked(err); ok {
		return o
	}
	if err != nil {
		return exits(1, "calico-node startup: failed to query the Kubernetes API: %v", err)
	}
	if _, err := p.View.WriteFile("/var/lib/calico/nodename", p.Cwd, []byte(name)); err != nil {
		return exits(1, "Unable to write to /var/lib/calico/nodename: %v", err)
	}
	return Outcome{State: Runs}
}

// cp is busybox's cp: each source to the destination.
func cp(p *Proc) Outcome {
	var paths []string
	for _, a := range p.Args {
		if !strings.HasPrefix(a, "-") {
			paths = append(paths, a)
		}
	}
	if len(paths) < 2 {
		return exits(1, "BusyBox: cp: missing file operand")
	}
	dst := paths[len(paths)-1]
	for _, src := range paths[:len(paths)-1] {
		data, err := p.View.ReadFile(src, p.Cwd)
		if err != nil {
			return exits(1, "cp: can't stat '%s': No such file or directory", src)
		}
		dir := dst[:max(strings.LastIndex(dst, "/"), 0)]
		if dir != "" && !p.View.Exists(dir, p.Cwd) {
			return exits(1, "cp: can't create '%s': No such file or directory", dst)
		}
		if _, err := p.View.WriteFile(dst, p.Cwd, data); err != nil {
			return exits(1, "cp: can't create '%s': %v", dst, err)
		}
	}
	return Outcome{State: Runs}
}
