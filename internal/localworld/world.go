// Package localworld is `winkube up`: a whole mixed cluster on one machine.
// It runs a management plane (etcd and kube-apiserver from bin/), Cluster
// API's controllers and winkube's in one manager, the ARM emulator, the
// machine runtime and its image registry, all in this process, and hands
// the flavor's objects to them as a user of Cluster API would.
package localworld

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/config"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/hostproc"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/apicallers"
	azcloud "github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
)

// Files of the state directory that carry a stopped world to its next start.
const (
	emulatorState = "emulator.json"
	hostnetState  = "hostnet.json"
	// BlockFile names the world's loopback block: its machines' addresses
	// are in their certificates and etcd, so it keeps the block it had.
	BlockFile = "loopback-block"
	// ManagementKubeconfig and SSHKeyFile are what node access reads of a
	// world: the management cluster, and the private key its machines let in.
	ManagementKubeconfig = "management.kubeconfig"
	SSHKeyFile           = "id_ed25519"
	// RegistryFile holds the running world's image registry (host:port),
	// which stands in for every public registry: 'winkube plan' reads the
	// images' manifest lists there, as the nodes pull them.
	RegistryFile = "registry"
	// DefaultLocalBootstrapTimeout is the local world's bootstrap deadline:
	// its machines join within seconds, so a rehearsed failure shows in
	// minutes, not in the half hour Azure's slowest Windows boots get.
	DefaultLocalBootstrapTimeout = 2 * time.Minute
)

// Subscription is the local world's one Azure subscription.
const Subscription = "00000000-0000-0000-0000-00000000c0de"

// Options are `winkube up`'s.
type Options struct {
	Name              string
	Flavor            string
	KubernetesVersion string
	ControlPlaneNodes int32
	LinuxNodes        int32
	WindowsNodes      int32
	WindowsVersion    infrav1.WindowsServerVersion
	// MetricsServer labels the cluster for the flavors' metrics-server
	// add-on, which its ClusterResourceSet then installs.
	MetricsServer bool
	// AzureDiskCSI labels the cluster for the flavors' Azure Disk CSI
	// driver add-on, which its ClusterResourceSet then installs.
	AzureDiskCSI bool
	// ResourceGroup is the cluster's Azure resource group; empty is the
	// cluster's name. Azure keeps a group's capitals in the IDs it returns,
	// and the cloud provider lower-cases them in provider IDs: a group with
	// capitals shows whether the two still find each other.
	ResourceGroup string
	// StateDir holds the management plane's etcd, the machines' disks, the
	// kubeconfigs and the SSH key.
	StateDir string
	// Bin holds the binaries hack/tools builds.
	Bin string
	// JoinTokenTTL is the lifetime of the kubeadm bootstrap tokens Cluster
	// API makes for joining nodes; zero is Cluster API's default (15
	// minutes). A MachinePool's token is rotated at half of it.
	JoinTokenTTL time.Duration
	// BootstrapTimeout is how long a provisioned machine may take to
	// become a node before the provider reports its bootstrap failed, with
	// its log read through the emulator's Run Command; zero is
	// DefaultLocalBootstrapTimeout.
	BootstrapTimeout time.Duration
	// Progress receives a line per change; nil discards.
	Progress func(string)
	Log      logr.Logger
}

// World is a running local world.
type World struct {
	opts   Options
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// callers counts the manager's requests by the controller that made
	// them (the bench's attribution of the management plane's load).
	callers *apicallers.Counter
	// cache is the controllers' cache, for reads repeated every second.
	cache client.Reader
	reg   *registry.Registry
	// admissionDone closes when the in-process workload admission stops.
	admissionDone chan struct{}
	net           *hostnet.Network
	emu           *arm.Server
	// dir is the world's Entra ID, login its endpoint; the clusters act
	// as the service principal sp.
	dir      *entra.Directory
	login    *entra.Server
	sp       entra.Principal
	spSecret string
	rt       *machines.Runtime
	block    *hostnet.Block
	lock     *os.File
	// emuSaver and netSaver keep the emulator's resources and the host
	// address map on disk as they change, so that the next start after a
	// SIGKILL finds the machines a clean stop would have left.
	emuSaver, netSaver *writeBehind
	// dirSaver keeps the Entra ID on disk likewise: the machines' managed
	// identities and the role assignments made through ARM.
	dirSaver *writeBehind
	// boots is when each machine began to boot, for bench.
	boots bootTimes
	// nodes follows the workload cluster's nodes for Status.
	nodes   nodeWatch
	cancel  context.CancelFunc
	mgrDone chan error
	// scheme and mgmtCfg are what the controllers are started with, again
	// on a restart.
	scheme  *runtime.Scheme
	mgmtCfg endpoint.Config
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// lockState takes the state directory for this process: two winkube
// processes on one state would run two copies of the same machines.
func lockState(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		holder := "another winkube"
		if pid, _ := lockHolder(f); pid > 0 {
			holder = fmt.Sprintf("another winkube (pid %d)", pid)
		}
		f.Close()
		return nil, fmt.Errorf("state directory %s is in use by %s; stop it first, or use --state-dir", dir, holder)
	}
	_ = os.WriteFile(filepath.Join(dir, pidFile), []byte(fmt.Sprint(os.Getpid())), 0o600)
	return f, nil
}

// Start brings up the management plane, the emulator and the controllers.
func Start(ctx context.Context, o Options) (*World, error) {
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if err := CheckKubernetesVersion(o.KubernetesVersion); err != nil {
		return nil, err
	}
	if err := ClaimStateDir(o.StateDir, o.Name); err != nil {
		return nil, err
	}
	lock, err := lockState(o.StateDir)
	if err != nil {
		return nil, err
	}
	limitMemory(o)
	w := &World{opts: o, lock: lock}
	if err := w.start(ctx); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// MemoryLimit is the least soft limit a local world's process keeps its
// Go memory under unless GOMEMLIMIT says otherwise. Without one the heap
// may grow to twice what is live before a collection, and the runtime
// returns freed memory slowly: a thousand-node world, with about 600 MiB
// live, held 2 GiB. Near the limit the collector runs more often (it never
// takes more than half the CPU); a world whose live objects outgrow it
// still runs, slower.
const MemoryLimit = 896 << 20

// The limit grows with the world (memoryLimit): a fixed 896 MiB held a
// 500-node world, whose live heap and goroutine stacks alone came near
// it (1.2 GiB resident), in almost constant collection, and the bring-up
// did not finish. Measured per node: at 1+20+80, 162 MiB of live heap and
// 86 MiB of goroutine stacks at Ready (about 2.5 MiB per node with the
// base); at 1+100+400 with no limit in reach, 2.4 GiB resident (about
// 4.9 MiB per node with the collector's headroom). 4 MiB per node over a
// 512 MiB base leaves the collector room to run at its own pace (GOGC)
// up to a few hundred nodes and about half of it beyond; half of the
// machine's memory caps it, so a world never claims what the machine's
// other processes (its API servers, etcd) need.
const (
	memoryBase    = 512 << 20
	memoryPerNode = 4 << 20
)

// memoryLimit is the soft limit for a world of nodes nodes on a machine
// of total bytes of memory (0 when unknown).
func memoryLimit(nodes int64, total int64) int64 {
	limit := max(MemoryLimit, memoryBase+nodes*memoryPerNode)
	if total > 0 {
		limit = min(limit, max(MemoryLimit, total/2))
	}
	return limit
}

// machineMemory is MemTotal from /proc/meminfo in bytes, 0 when unknown.
func machineMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

func limitMemory(o Options) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(hostproc.GCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(memoryLimit(int64(o.ControlPlaneNodes)+int64(o.LinuxNodes)+int64(o.WindowsNodes), machineMemory()))
	}
}

// Tenant is the local world's Azure tenant, written to the nodes' cloud
// provider config.
const Tenant = "6f7a1e2b-5c3d-4e8f-9a0b-1c2d3e4f5a6b"

func (w *World) start(ctx context.Context) (err error) {
	o := w.opts
	manifests := filepath.Join(o.StateDir, "manifests")
	if err := config.Write(manifests); err != nil {
		return err
	}
	o.progress("management plane: starting etcd and kube-apiserver")
	crds := []string{filepath.Join(manifests, "crd")}
	for _, p := range []string{"core-v1beta2", "bootstrap-kubeadm-v1beta2", "controlplane-kubeadm-v1beta2", "addons-v1beta2"} {
		crds = append(crds, filepath.Join(manifests, "capi", p))
	}
	s := scheme.New()
	launchers, err := dieWithWinkube(filepath.Join(o.StateDir, "launchers"), o.Bin, "etcd", "kube-apiserver")
	if err != nil {
		return err
	}
	w.env = &envtest.Environment{
		BinaryAssetsDirectory: o.Bin, CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true, Scheme: s,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(manifests, "webhook")}},
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: filepath.Join(o.StateDir, "management-etcd"), Path: launchers["etcd"]},
			APIServer: &envtest.APIServer{Path: launchers["kube-apiserver"]},
		},
	}
	pki, err := ensureEtcdPKI(filepath.Join(o.StateDir, etcdPKIDir))
	if err != nil {
		return err
	}
	if err := secureEtcd(w.env.ControlPlane.Etcd, w.env.ControlPlane.APIServer, pki); err != nil {
		return err
	}
	// The local world (registry, Entra ID, emulator, machine runtime) needs
	// nothing from the management plane: it starts while etcd and the API
	// server do, not after them.
	o.progress("local world: image registry, Azure emulator, machine runtime")
	local := make(chan error, 1)
	go func() { local <- w.startLocal(ctx) }()
	if w.Config, err = w.env.Start(); err != nil {
		err = fmt.Errorf("management plane: %w", err)
	}
	if err := errors.Join(err, <-local); err != nil {
		return err
	}
	if w.Client, err = client.New(w.Config, client.Options{Scheme: s}); err != nil {
		return err
	}
	if err := warmWatchCaches(ctx, w.Config, w.env.CRDs); err != nil {
		o.Log.Info("reading the custom resources ahead of the controllers", "error", err.Error())
	}

	o.progress("controllers: Cluster API (core with MachinePools and MachineHealthChecks, kubeadm bootstrap, kubeadm control plane, ClusterResourceSet) and winkube")
	w.scheme = s
	return w.startControllers()
}

// startLocal starts the world's image registry, host network, Entra ID,
// machine runtime and Azure emulator, and brings back the resources and
// machines of the last run.
func (w *World) startLocal(ctx context.Context) (err error) {
	o := w.opts
	if w.reg, err = registry.Start("127.0.0.1:0"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.StateDir, RegistryFile), []byte(w.reg.Host()+"\n"), 0o600); err != nil {
		return err
	}
	// 'winkube image load' publishes the user's images through this
	// socket; the registry's port refuses writes from anyone else.
	if err := w.reg.ServePush(filepath.Join(o.StateDir, registry.PushSocket)); err != nil {
		return err
	}
	images, err := w.catalog(ctx)
	if err != nil {
		return err
	}
	if err := w.reg.PushAll(ctx, images); err != nil {
		return err
	}
	versions, err := versionBins(o.Bin, o.KubernetesVersion)
	if err != nil {
		return err
	}
	if w.block, err = claimBlock(o.StateDir); err != nil {
		return err
	}
	if w.net, err = hostnet.New(w.block.Hosts); err != nil {
		return err
	}
	if err := w.net.Load(filepath.Join(o.StateDir, hostnetState)); err != nil {
		return err
	}
	w.netSaver = newWriteBehind("host address map", func() error { return w.net.Save(filepath.Join(o.StateDir, hostnetState)) }, o.Log)
	w.net.OnChange(w.netSaver.mark)
	w.netSaver.start()
	if err := w.startDirectory(); err != nil {
		return err
	}
	var armCfg endpoint.Config
	emuSaver := newWriteBehind("Azure resources", func() error { return w.emu.Save(filepath.Join(o.StateDir, emulatorState)) }, o.Log)
	w.rt, err = machines.New(machines.Options{
		Bin: o.Bin, Versions: versions, Dir: filepath.Join(o.StateDir, "machines"), Network: w.net, Images: w.reg,
		Cloud:   machines.ARMNetwork(connectARM(&armCfg)),
		Compute: machines.ARMCompute(connectARM(&armCfg)),
		Events:  func(machine, msg string) { w.boots.note(machine); o.Log.V(1).Info(msg, "machine", machine) },
		Log:     o.Log.WithName("machines"),
	})
	if err != nil {
		return err
	}
	// The world's subscription is in its tenant, and only the world's own
	// principal may use the emulator's control API (faults, counters).
	if w.emu, err = arm.New(arm.Options{Directory: w.dir, TenantID: Tenant, Operators: []string{w.sp.ObjectID},
		PollInterval: 200 * time.Millisecond, Runtime: w.rt, PublicIPPool: w.block.Public, PublicIPStart: publicIPStart(w.block.Public),
		BootDelayLinux: 500 * time.Millisecond, BootDelayWindows: 2 * time.Second, OnChange: emuSaver.mark}); err != nil {
		return err
	}
	if err := w.emu.Start("127.0.0.1:0"); err != nil {
		return err
	}
	if err := w.serveDirectory(); err != nil {
		return err
	}
	// The controllers have no credential of their own: every cluster acts
	// as its AzureClusterIdentity.
	mgmtCfg, err := endpoint.Config{ResourceManagerEndpoint: w.emu.URL(), AuthorityHost: w.login.URL(), CACertPEM: w.emu.CACertPEM(),
		Retry: &policy.RetryOptions{MaxRetries: 10, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 10 * time.Second}}.Shared()
	if err != nil {
		return err
	}
	// Commands run beside the world (winkube logs when a node's SSH is
	// out of reach) reach its Azure as the provider does: this endpoint,
	// this Entra ID, this CA, and the cluster's identity.
	if err := WriteARMEndpoint(filepath.Join(o.StateDir, ARMEndpointFile), ARMEndpoint{
		ResourceManager: w.emu.URL(), Authority: w.login.URL(), CACertPEM: string(w.emu.CACertPEM())}); err != nil {
		return err
	}
	// The clusters' cloud controllers authenticate as their cloud
	// configs say, through this Entra ID or their VMs' IMDS.
	armCfg = mgmtCfg
	w.mgmtCfg = mgmtCfg
	if _, err := os.Stat(filepath.Join(o.StateDir, emulatorState)); err == nil {
		// A world stopped earlier: its resources come back and its
		// machines boot again from their disks.
		o.progress("local world: resuming the Azure resources and machines of the last run")
		if err := w.emu.Load(filepath.Join(o.StateDir, emulatorState)); err != nil {
			return err
		}
	}
	// Only now: a world that failed to load its state keeps the file.
	w.emuSaver = emuSaver
	w.emuSaver.start()
	return nil
}

// startControllers starts Cluster API's controllers and winkube's, with
// winkube's webhooks, in one manager, and returns once their caches synced
// and the webhooks answer.
func (w *World) startControllers() error {
	s, mgmtCfg, o := w.scheme, w.mgmtCfg, w.opts
	wio := &w.env.WebhookInstallOptions
	if w.callers == nil {
		w.callers = apicallers.New()
	}
	cfg := rest.CopyConfig(w.Config)
	cfg.Wrap(w.callers.Wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, Logger: w.callers.Logger(o.Log.WithName("controllers")),
		// Cluster API's controllers read the objects they reference (the
		// infrastructure and bootstrap of every Machine) as unstructured:
		// from the cache, as Cluster API's own managers are set up, not
		// with a GET to the API server each time.
		Client:        controllers.ReadSecretsLive(client.Options{Cache: &client.CacheOptions{Unstructured: true}}),
		Cache:         controllers.SecretCache(cache.Options{}),
		WebhookServer: webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if err := setupClusterAPI(mctx, mgr, o.JoinTokenTTL); err != nil {
		return err
	}
	if err := controllers.Setup(mgr, controllers.Options{Cloud: azcloud.New(mgmtCfg), Concurrency: 16, Requeue: time.Second, SkipNameValidation: true, TenantID: Tenant,
		BootstrapTimeout: o.bootstrapTimeout(), PoolBootstrapTimeout: o.bootstrapTimeout()}); err != nil {
		return err
	}
	if err := webhooks.SetupWithManager(mgr); err != nil {
		return err
	}
	w.cache = mgr.GetCache()
	w.mgrDone = make(chan error, 1)
	go func() { w.mgrDone <- mgr.Start(mctx) }()
	w.admissionDone = make(chan struct{})
	go func() { defer close(w.admissionDone); w.serveAdmission(mctx) }()
	synced := make(chan bool, 1)
	go func() { synced <- mgr.GetCache().WaitForCacheSync(mctx) }()
	select {
	case err := <-w.mgrDone:
		w.mgrDone <- nil // stopControllers waits for it; err is returned here, not reported twice
		return fmt.Errorf("controllers: %w", err)
	case ok := <-synced:
		if !ok {
			return errors.New("controllers: caches did not sync")
		}
	}
	// The management API server calls winkube's webhooks for every
	// AzureCluster and AzureMachine: the cluster is created only once they
	// answer, not merely once the caches synced.
	started := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(mctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return started(nil) == nil, nil
	}); err != nil {
		return fmt.Errorf("controllers: winkube's webhook server did not start: %w", started(nil))
	}
	return nil
}

// RestartControllers stops the manager and starts a new one, as a restart
// of the controllers' Pod in a management cluster does: nothing of what
// they held in memory survives, their caches are filled again from the API
// server, and every object is reconciled again.
func (w *World) RestartControllers() error {
	w.stopControllers()
	return w.startControllers()
}

// stopControllers stops the manager and the in-process admission, waiting
// for both.
func (w *World) stopControllers() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.cancel = nil
	select {
	case err := <-w.mgrDone:
		if err != nil {
			w.opts.Log.Error(err, "the controllers failed as they stopped")
		}
	case <-time.After(30 * time.Second):
	}
	select {
	case <-w.admissionDone:
	case <-time.After(30 * time.Second):
	}
}

// Stop stops everything this process started; the state directory keeps
// the management plane's data.
func (w *World) Stop() {
	w.stopControllers()
	w.nodes.close()
	// Machines first, keeping their disks; then the emulator's resources
	// and the address map are saved a last time for the next start.
	if w.rt != nil {
		w.rt.Close()
	}
	if w.emuSaver != nil {
		w.emuSaver.close()
	}
	if w.emu != nil {
		_ = w.emu.Close()
	}
	if w.login != nil {
		_ = w.login.Close()
	}
	if w.dirSaver != nil {
		w.dirSaver.close()
	}
	if w.netSaver != nil {
		w.netSaver.close()
	}
	if w.net != nil {
		w.net.Close()
	}
	if w.reg != nil {
		_ = w.reg.Close()
	}
	w.block.Release()
	if w.env != nil {
		_ = w.env.Stop()
	}
	if w.lock != nil {
		_ = os.Remove(filepath.Join(w.opts.StateDir, pidFile))
		_ = w.lock.Close()
	}
}

// claimBlock takes the world's loopback block: the one it had, or a free
// one for a new world. A world from before blocks were recorded used the
// first.
func claimBlock(dir string) (*hostnet.Block, error) {
	path := filepath.Join(dir, BlockFile)
	index := -1
	if b, err := os.ReadFile(path); err == nil {
		if index, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, fmt.Errorf("%s: %q is not a block number", path, b)
		}
	} else if _, err := os.Stat(filepath.Join(dir, emulatorState)); err == nil {
		index = 0
	}
	block, err := hostnet.ClaimBlock(index)
	if err != nil {
		return nil, fmt.Errorf("local world %s: %w", dir, err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(block.Index)+"\n"), 0o600); err != nil {
		block.Release()
		return nil, err
	}
	return block, nil
}

// Emulator is the ARM emulator, for tests and diagnosis.
func (w *World) Emulator() *arm.Server { return w.emu }

// Runtime is the machine runtime.
func (w *World) Runtime() *machines.Runtime { return w.rt }

// sshKey returns the cluster's SSH public key, made once per state dir.
func sshKey(dir string) (string, error) {
	path := filepath.Join(dir, SSHKeyFile)
	if b, err := os.ReadFile(path + ".pub"); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "winkube")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " winkube"
	return line, os.WriteFile(path+".pub", []byte(line+"\n"), 0o600)
}

// connectARM reaches ARM and Entra ID at the endpoints of the
// configuration (filled in once the emulator runs), with no credential of
// its own: each cluster's cloud controller uses its cloud config's.
func connectARM(cfg *endpoint.Config) machines.ARMConnection {
	return func() (azcore.TokenCredential, *azarm.ClientOptions, error) {
		opts, err := cfg.ClientOptions()
		return nil, opts, err
	}
}

func (o Options) bootstrapTimeout() time.Duration {
	if o.BootstrapTimeout > 0 {
		return o.BootstrapTimeout
	}
	return DefaultLocalBootstrapTimeout
}
