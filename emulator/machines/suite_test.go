package machines_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

const (
	token       = "machines-test"
	k8sVersion  = "v1.36.3"
	subscriptID = "00000000-0000-0000-0000-0000000000aa"
)

// bootLog keeps the runtime's boot steps for failure reports.
type bootSteps struct {
	mu    sync.Mutex
	lines []string
}

func (b *bootSteps) add(machine, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, time.Now().Format("15:04:05.000")+" "+machine+": "+msg)
}

func (b *bootSteps) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

var bootLog = &bootSteps{}

var (
	env    *testenv.Env
	emu    *arm.Server
	armCfg endpoint.Config
	rt     *machines.Runtime
	reg    *registry.Registry
	hn     *hostnet.Network
	// publicPool is where this run's emulator hands out public IPs.
	publicPool netip.Prefix
)

// TestMain runs a management API server (envtest) with Cluster API's CRDs,
// the in-process image registry with the local world's catalog, and the
// ARM emulator booting machines with the real machine runtime.
func TestMain(m *testing.M) {
	logs := io.Discard
	if os.Getenv("WINKUBE_TEST_LOGS") != "" {
		logs = os.Stderr
	}
	log.SetLogger(zap.New(zap.WriteTo(logs)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	root, err := testenv.ModuleRoot()
	if err != nil {
		return fail(err)
	}
	bin, err := testenv.BinDir()
	if err != nil {
		return fail(err)
	}
	if reg, err = registry.Start("127.0.0.1:0"); err != nil {
		return fail(err)
	}
	defer reg.Close()
	out, err := exec.Command(filepath.Join(bin, "kubeadm"), "config", "images", "list", "--kubernetes-version", k8sVersion).Output()
	if err != nil {
		return fail(fmt.Errorf("kubeadm config images list: %w", err))
	}
	if err := reg.PushAll(context.Background(), registry.Catalog(k8sVersion, strings.Fields(string(out)))); err != nil {
		return fail(err)
	}
	// Its own loopback block: local worlds of other test packages may run
	// at the same time.
	block, err := hostnet.ClaimBlock(-1)
	if err != nil {
		return fail(err)
	}
	publicPool = block.Public
	defer block.Release()
	if hn, err = hostnet.New(block.Hosts); err != nil {
		return fail(err)
	}
	defer hn.Close()
	dir, err := os.MkdirTemp("", "winkube-machines-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	rt, err = machines.New(machines.Options{
		Bin: bin, Dir: dir, Network: hn, Images: reg,
		Cloud:   machines.ARMNetwork(connectARM(&armCfg)),
		Compute: machines.ARMCompute(connectARM(&armCfg)),
		Log:     log.Log.WithName("machines"),
		Events:  bootLog.add,
	})
	if err != nil {
		return fail(err)
	}
	defer rt.Close()
	emu, err = arm.New(arm.Options{Token: token, PollInterval: 50 * time.Millisecond, Runtime: rt, Seed: 11, PublicIPPool: block.Public})
	if err == nil {
		err = emu.Start("127.0.0.1:0")
	}
	if err != nil {
		return fail(err)
	}
	defer emu.Close()
	armCfg = endpoint.Config{
		ResourceManagerEndpoint: emu.URL(), CACertPEM: emu.CACertPEM(), Credential: endpoint.StaticToken(token),
		Retry: &policy.RetryOptions{MaxRetries: 5, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
	}
	var crds []string
	for _, d := range []string{"capi/core-v1beta2", "capi/bootstrap-kubeadm-v1beta2"} {
		crds = append(crds, filepath.Join(root, "config", d))
	}
	return testenv.Main(m, testenv.Options{Scheme: scheme.New(), CRDDirectoryPaths: crds}, func(e *testenv.Env) { env = e })
}
