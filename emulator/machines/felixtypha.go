package machines

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/typha"
)

// felixTyphaService says whether Felix runs via Typha: its container's
// environment, resolved as the kubelet resolves it (calico-config's
// typha_service_name for the manifest's calico-node), names a Typha
// Service that is not empty or "none" (felix/config/config_params.go,
// v3.30.7). A container whose spec does not name the variable runs
// without Typha and costs no resolution.
//
// The session starts with the first of the pod's containers that is the
// component (calico-node-windows's install-cni, before its felix
// container): the environment is the one of the component's container
// that names the variable, Felix's.
func felixTyphaService(wc *workloadCluster, endpoint string, comp *startneeds.Component, pod *corev1.Pod, c corev1.Container, logf func(string, ...any)) (svc, ns string, ok bool) {
	tc := comp.Typha
	if tc == nil {
		return "", "", false
	}
	names := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == tc.ServiceEnv })
	}
	if !names(c) {
		found := false
		for _, other := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			if f := catalog().Find(comp.OS, other); f != nil && f.Name == comp.Name && names(other) {
				c, found = other, true
				break
			}
		}
		if !found {
			return "", "", false
		}
	}
	admin, err := kubernetes.NewForConfig(wc.viaEndpoint(endpoint))
	if err != nil {
		logf("%v", err)
		return "", "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := resolvedEnv(ctx, admin, pod, c)
	if err != nil {
		logf("resolving %s: %v", tc.ServiceEnv, err)
		return "", "", false
	}
	svc = tc.Service(env)
	return svc, tc.Namespace(env), svc != ""
}

// typhaFelix is Felix configured with a Typha Service
// (felix/daemon/daemon.go, projectcalico/calico v3.30.7 74485ea4). Its
// config loop reads the API with its own token (the server's version,
// ClusterInformation default, FelixConfiguration default and
// node.<node>, its Node, the IP pools), then discovers Typha once (GET
// the Service's Endpoints); a failure logs "Typha discovery enabled but
// discovery failed." and redoes the loop after 1 s. Then Typha replaces
// its own syncer: typha.Client connects over the node network to an
// endpoint's address (a node address, so a Windows node reaches a Linux
// Typha before its kube-proxy runs) and follows the felix syncer's
// stream. When the client gives up or its connection is lost, Felix
// exits and runit starts it again: the whole sequence after 1 s.
type typhaFelix struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	reads  atomic.Int64
	client atomic.Pointer[typha.Client]
	why    atomic.Pointer[string]
}

// felixConfigLoopPause is daemon.go's sleep before redoing the config
// loop, and our pause before runit's restart.
const felixConfigLoopPause = time.Second

func (r *Runtime) startFelixViaTypha(m *machine, wc *workloadCluster, comp *startneeds.Component, cfg *rest.Config, svc, ns string, logf func(string, ...any)) *typhaFelix {
	rc := rest.CopyConfig(cfg)
	if comp.Client.QPS > 0 {
		rc.QPS = comp.Client.QPS
	}
	if comp.Client.Burst > 0 {
		rc.Burst = comp.Client.Burst
	}
	rc.WarningHandler = rest.NoWarnings{}
	f := &typhaFelix{done: make(chan struct{})}
	f.setWhy("starting")
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return startneeds.CountRequests(rt, &f.reads) })
	f.ctx, f.cancel = context.WithCancel(context.Background())
	cs, err := kubernetes.NewForConfig(rc)
	var admin kubernetes.Interface
	if err == nil {
		admin, err = kubernetes.NewForConfig(wc.viaEndpoint(m.endpoint))
	}
	if err != nil {
		logf("%v", err)
		f.setWhy(err.Error())
		close(f.done)
		return f
	}
	logf("Felix takes its updates from Typha: Service %s/%s", ns, svc)
	go func() {
		defer close(f.done)
		f.run(cs, admin, m.nodeName, svc, ns, comp.Typha.PortName, r.nodeDial(m), func(in bool) { r.podRoutesSynced(m, in) }, logf)
	}()
	return f
}

func (f *typhaFelix) run(cs, admin kubernetes.Interface, node, svc, ns, port string, dial func(context.Context, string) (net.Conn, error), inSync func(bool), logf func(string, ...any)) {
	ctx := f.ctx
	last := ""
	fail := func(msg string) bool {
		f.setWhy(msg)
		if msg != last {
			logf("%s", msg)
			last = msg
		}
		t := time.NewTimer(felixConfigLoopPause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		if err := felixConfigReads(ctx, cs, node); err != nil {
			if ctx.Err() != nil || !fail("Failed to load configuration from the datastore: "+err.Error()) {
				return
			}
			continue
		}
		addrs, err := discoverTyphas(ctx, cs, admin, ns, svc, port)
		if err != nil {
			if ctx.Err() != nil || !fail("Typha discovery enabled but discovery failed. error="+err.Error()) {
				return
			}
			continue
		}
		// Until its first dial, the client has the addresses just
		// discovered (the discoverer's cached ones, which the first
		// connection round tries: discovery.go ConnectionAttemptTracker);
		// later rounds discover again.
		c := &typha.Client{Hostname: node, Syncer: typha.SyncerFelix, Info: "felix", Dial: dial, OnInSync: inSync}
		c.Discover = func(ctx context.Context) ([]typha.Addr, error) {
			if c.Attempts() == 0 {
				return addrs, nil
			}
			return discoverTyphas(ctx, cs, admin, ns, svc, port)
		}
		f.client.Store(c)
		err = c.Run(ctx)
		f.client.Store(nil)
		if ctx.Err() != nil || !fail(fmt.Sprintf("Felix exits (%v); its supervisor starts it again", err)) {
			return
		}
	}
}

// felixConfigReads are the reads of Felix's config loop before it
// discovers Typha (daemon.go: the server's version; loadConfigFromDatastore
// reads ClusterInformation default, FelixConfiguration default and
// node.<node>, and its Node; the IP pools list), with Felix's token. A
// missing object is a default, not an error.
func felixConfigReads(ctx context.Context, cs kubernetes.Interface, node string) error {
	const calico = "/apis/crd.projectcalico.org/v1/"
	rc := cs.CoreV1().RESTClient()
	for _, path := range []string{"/version", calico + "clusterinformations/default", calico + "felixconfigurations/default",
		calico + "felixconfigurations/node." + node, "/api/v1/nodes/" + node, calico + "ippools"} {
		if _, err := rc.Get().AbsPath(path).DoRaw(ctx); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (f *typhaFelix) setWhy(s string) { f.why.Store(&s) }

// NotSynced is "" once Typha has said its felix syncer is in sync, else
// why not: what Felix's readiness reports.
func (f *typhaFelix) NotSynced() string {
	if c := f.client.Load(); c != nil {
		if ns := c.NotSynced(); ns != "" {
			return "via Typha: " + ns
		}
		return ""
	}
	return "via Typha: " + *f.why.Load()
}

func (f *typhaFelix) Synced() bool          { return f.NotSynced() == "" }
func (f *typhaFelix) Done() <-chan struct{} { return f.ctx.Done() }
func (f *typhaFelix) Reads() int64          { return f.reads.Load() }

func (f *typhaFelix) Stop() {
	f.cancel()
	<-f.done
}
