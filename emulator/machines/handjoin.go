package machines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/bootagent"
	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/join"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

// bootPlain boots a machine no Cluster API object made: cloudbase-init
// (or cloud-init) creates its users and writes its files, and the machine
// waits for a login. A feature installed before a restart is installed
// now. It becomes a node only when a join script run in its shell calls
// kubeadm join (handHost).
func (r *Runtime) bootPlain(ctx context.Context, m *machine, b *bootdata.BootData, host netip.Addr) error {
	agent := &bootagent.Agent{Windows: m.windows(), Disk: m.disk(""), Logs: m.logs}
	agent.Run(ctx, b)
	sh := &vmshell.Machine{Disk: m.disk("")}
	if err := sh.Restarted(); err != nil {
		return err
	}
	r.mu.Lock()
	m.ctx, m.host = ctx, host
	r.mu.Unlock()
	st, err := sh.ReadState()
	if err != nil {
		return err
	}
	_, joinedErr := os.Stat(m.kubeletConf())
	start, why := servicesAtBoot(st, joinedErr == nil)
	if !start {
		r.event(m, "booted: "+why)
		return nil
	}
	return r.startHandKubelet(ctx, m, st, host)
}

// servicesAtBoot says whether the kubelet starts when a machine joined by
// hand boots, and why not: the join script registers containerd
// (containerd.exe --register-service makes an automatic service) and the
// kubelet (nssm install, automatic by default; the script sets
// SERVICE_AUTO_START after kubeadm join, as CAPZ's Windows template
// does) with DependOnService containerd, so Windows' service control
// manager starts both at boot, containerd first, and the kubelet runs
// with the credentials kubeadm join left. A kubelet that is no service
// (never registered, or deleted since) does not start; one whose
// containerd service is gone fails its dependency (ERROR_SERVICE_DEPENDENCY_DELETED).
func servicesAtBoot(st vmshell.State, joined bool) (bool, string) {
	switch {
	case !joined:
		return false, "its boot data creates users and runs no kubeadm; it is no node until joined by hand"
	case !st.Services["kubelet"]:
		return false, `no kubelet service is registered (Get-Service kubelet finds none): the node's kubelet does not start, and the node stays NotReady until the kubelet runs again (register it as the join script does, or run winkube node join again)`
	case !st.Services["containerd"]:
		return false, "the kubelet service did not start: its dependency containerd is no service (The dependency service does not exist or has been marked for deletion.)"
	case st.Node == "":
		return false, "the kubelet service starts, but the join script recorded no node name for it"
	}
	return true, ""
}

// startHandKubelet starts the kubelet of a machine joined by hand as its
// service does at boot: with the flags StartKubelet.ps1 gives it and the
// node's credentials from kubeadm join (kubelet.conf), on the containerd
// the script installed.
func (r *Runtime) startHandKubelet(ctx context.Context, m *machine, st vmshell.State, host netip.Addr) error {
	cfg, err := join.LoadKubeconfig(m.kubeletConf())
	if err != nil {
		return fmt.Errorf("the kubelet service: reading its kubeconfig: %w", err)
	}
	reg := handRegistration(st.Node, st.CRISocket, st.KubeletArgs)
	endpoint := st.APIServer
	r.mu.Lock()
	m.nodeName, m.containerd = reg.Name, st.Containerd
	m.endpoint = r.endpointOf(cfg, endpoint)
	r.mu.Unlock()
	client, err := kubeletClient(cfg)
	if err != nil {
		return err
	}
	r.event(m, "booted: the containerd and kubelet services registered by the join script start again with the node's credentials")
	return r.startKubelet(ctx, m, client, clusterCA(cfg), reg, nil, nil, host, st.Kubelet)
}

// handRegistration is the node registration of a kubelet started with
// StartKubelet.ps1's flags.
func handRegistration(node, criSocket string, args []string) bootdata.NodeRegistration {
	reg := bootdata.NodeRegistration{Name: strings.ToLower(node), CRISocket: criSocket}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		reg.KubeletExtraArgs = append(reg.KubeletExtraArgs, bootdata.Arg{Name: name, Value: strings.Trim(value, "`\"")})
	}
	return reg
}

// endpointOf is the controlPlaneEndpoint by which the runtime knows the
// cluster whose CA cfg trusts; the address a node was given
// (cluster-info's or --api-server) may be another name of it. The caller
// holds r.mu.
func (r *Runtime) endpointOf(cfg *rest.Config, fallback string) string {
	for ep, wc := range r.clusters {
		if wc.admin != nil && len(cfg.CAData) > 0 && bytes.Equal(bytes.TrimSpace(wc.admin.CAData), bytes.TrimSpace(cfg.CAData)) {
			return ep
		}
	}
	return fallback
}

// handHost is a plain machine's kubeadm, which the join script's steps
// run in its shell.
type handHost struct {
	r *Runtime
	m *machine
}

var _ vmshell.NodeHost = handHost{}

// kubeletConf is where kubeadm join leaves the node's credentials.
func (m *machine) kubeletConf() string {
	return filepath.Join(m.dir, "root", "etc", "kubernetes", "kubelet.conf")
}

// KubeadmJoin runs kubeadm join's phases as a worker's boot does and
// starts the node's kubelet with what the script installed: its version,
// its flags, containerd's release.
func (h handHost) KubeadmJoin(_ context.Context, j vmshell.HandJoin, print func(string)) int {
	r, m := h.r, h.m
	r.mu.Lock()
	ctx, host := m.ctx, m.host
	r.mu.Unlock()
	if ctx == nil {
		print("winkube: the machine has not finished booting")
		return 1
	}
	fail := func(err error) int {
		print(err.Error())
		print("To see the stack trace of this error execute with --v=5 or higher")
		return 1
	}
	if _, err := os.Stat(m.kubeletConf()); err == nil {
		// kubeadm's preflight FileAvailable check
		// (cmd/kubeadm/app/preflight/checks.go).
		return fail(errors.New("error execution phase preflight: [preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists"))
	}
	reg := handRegistration(j.NodeName, j.CRISocket, j.KubeletArgs)
	criErr := criDialError(j.CRISocket, true)
	if criErr == "" && (j.ContainerdVersion == "" || !j.ContainersFeature) {
		// No containerd service, or one that cannot run containers
		// without the feature: nothing serves its pipe.
		criErr = criUnreachable(j.CRISocket)
	}
	// Other goroutines (nodeIMDS, nodeFiles, Nodes, the cloud's instances)
	// read these under r.mu while the machine runs.
	r.mu.Lock()
	m.nodeName, m.endpoint, m.containerd = reg.Name, j.APIServer, j.ContainerdVersion
	r.mu.Unlock()
	cfg, err := r.joinPhases(ctx, m, joinRun{
		disc: join.Discovery{Endpoint: j.APIServer, Token: j.Token, CACertHashes: []string{j.CACertHash}},
		reg:  reg, criErr: criErr, kubeletVersion: j.KubeletVersion, noKubeletService: !j.KubeletService,
		discoveryTimeout: r.opts.JoinTimeout, healthTimeout: r.opts.KubeletHealthCheckTimeout,
	}, print)
	if err != nil {
		return fail(err)
	}
	// The runtime knows a cluster by its controlPlaneEndpoint; the address
	// the script was given (cluster-info's or --api-server) may be another
	// name of it: the cluster's CA says which.
	r.mu.Lock()
	m.endpoint = r.endpointOf(cfg, m.endpoint)
	r.mu.Unlock()
	client, err := kubeletClient(cfg)
	if err != nil {
		return fail(err)
	}
	if err := r.startKubelet(ctx, m, client, clusterCA(cfg), reg, nil, nil, host, j.KubeletVersion); err != nil {
		return fail(fmt.Errorf("the kubelet did not start: %w", err))
	}
	return 0
}

// KubeadmReset stops the node's kubelet and removes what kubeadm join
// wrote; the Node object stays, as kubeadm reset leaves it.
func (h handHost) KubeadmReset(_ context.Context, print func(string)) int {
	r, m := h.r, h.m
	r.mu.Lock()
	k := m.kubelet
	m.kubelet, m.kubeletVersion, m.proxyNode = nil, "", nil
	r.mu.Unlock()
	if k != nil {
		print("[reset] Stopping the kubelet service")
		k.Stop()
	}
	r.stopAllSessions(m)
	// The node joins again as a new Node, maybe with another pod CIDR:
	// no other node has its routes until both agents sync anew.
	r.mu.Lock()
	m.podRoutes = routeSpan{}
	r.mu.Unlock()
	r.stopProxy(m)
	print("[reset] Deleting files: [" + `C:\etc\kubernetes\kubelet.conf` + "]")
	_ = os.Remove(m.kubeletConf())
	return 0
}
