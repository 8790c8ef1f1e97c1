package machines

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/emulator/machines/typha"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/registry"
)

// typhaRepo is Typha's image: a container of it runs the simulated Typha
// (package typha) as its program.
const typhaRepo = "docker.io/calico/typha"

// Typha's settings the manifest may change and their defaults
// (typha/pkg/config/config_params.go, projectcalico/calico v3.30.7
// 74485ea4): the environment's TYPHA_<NAME> sets <Name>.
var typhaDefaults = map[string]string{
	"TYPHA_HEALTHPORT":                strconv.Itoa(typha.DefaultHealthPort),
	"TYPHA_K8SNAMESPACE":              typha.DefaultServiceNamespace,
	"TYPHA_K8SSERVICENAME":            typha.DefaultServiceName,
	"TYPHA_K8SPORTNAME":               typha.DefaultServiceName,
	"TYPHA_CONNECTIONREBALANCINGMODE": "none",
}

// runTypha starts Typha for a container of its image on the pod's host
// address: one startneeds session per syncer (typha/pkg/daemon/daemon.go
// CreateServer), with the pod's own token, feeding that syncer's cache;
// the sync server on 5473; health on TYPHA_HEALTHPORT (/readiness 200
// only when every cache is in sync, which the manifest's readiness probe
// asks); and, in rebalancing mode kubernetes, the connection limit from
// the Service's Endpoints (typha/pkg/k8s/rebalance.go). Everything stops
// with ctx, and its clients' connections with it: each of their Felixes
// exits and finds another Typha.
//
// What is not simulated: Typha's EnsureInitialized of the datastore at
// start (calico-node's startup writes the same ClusterInformation,
// ensureClusterInformation), TLS (the manifest runs none), and the
// graceful shedding over the termination grace period (typha.Server.Shed).
func (r *Runtime) runTypha(ctx context.Context, m *machine, wc *workloadCluster, pod *corev1.Pod, c corev1.Container, addr netip.Addr) error {
	comp := catalog().Find("linux", c)
	if comp == nil || comp.Effect != startneeds.EffectTyphaServer {
		return errors.New("no Typha component for " + c.Image)
	}
	cfg, err := podAPIServer(wc, m.endpoint, pod)
	if err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(wc.viaEndpoint(m.endpoint))
	if err != nil {
		return err
	}
	env, err := resolvedEnv(ctx, admin, pod, c)
	if err != nil {
		return err
	}
	setting := func(name string) string {
		if v := env[name]; v != "" {
			return v
		}
		return typhaDefaults[name]
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(typha.DefaultPort)))
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(addr.String(), setting("TYPHA_HEALTHPORT")))
	if err != nil {
		l.Close()
		return err
	}
	who := fmt.Sprintf("%s/%s %s", pod.Namespace, pod.Name, c.Name)
	logf := func(format string, args ...any) {
		m.logs.Write(vmdisk.Containerd, "%s: %s", who, fmt.Sprintf(format, args...))
	}
	// Every cache exists before the server and its health read them.
	caches := map[typha.SyncerType]*typha.Cache{}
	feeds := map[typha.SyncerType]*typhaFeed{}
	for _, s := range comp.Syncers {
		st := typha.SyncerType(s.Type)
		caches[st] = typha.NewCache(nil)
		feeds[st] = &typhaFeed{cache: caches[st], keys: map[string]map[string]string{}}
	}
	srv := &typha.Server{Caches: caches}
	health := &http.Server{Handler: srv.Health(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = health.Serve(hl) }()
	go func() {
		if err := srv.Serve(ctx, l); err != nil {
			logf("sync server: %v", err)
		}
	}()
	var sessions []*startneeds.Session
	for _, s := range comp.Syncers {
		st := typha.SyncerType(s.Type)
		feed := feeds[st]
		feed.cache.SetStatus(typha.ResyncInProgress)
		sess, err := startneeds.StartSession(startneeds.SessionConfig{
			Config: cfg, Node: m.nodeName, Watches: s.Watches, Sync: comp.Sync, Client: comp.Client,
			Log: func(format string, args ...any) { logf("%s syncer: %s", st, fmt.Sprintf(format, args...)) },
			OnChange: func(synced bool) {
				if synced {
					feed.cache.SetStatus(typha.InSync)
					logf("%s syncer in sync", st)
					return
				}
				feed.cache.SetStatus(typha.ResyncInProgress)
			},
			OnList: feed.list, OnEvent: feed.event,
		})
		if err != nil {
			logf("%s syncer: %v", st, err)
			continue
		}
		sessions = append(sessions, sess)
	}
	if setting("TYPHA_CONNECTIONREBALANCINGMODE") == "kubernetes" {
		count := typhaCounter(cfg, admin, setting("TYPHA_K8SNAMESPACE"), setting("TYPHA_K8SSERVICENAME"), setting("TYPHA_K8SPORTNAME"), caches[typha.SyncerFelix])
		go srv.Rebalance(ctx, count)
	}
	logf("Typha serving %d syncers on %s (health on %s)", len(caches), l.Addr(), hl.Addr())
	go func() {
		<-ctx.Done()
		for _, s := range sessions {
			s.Stop()
		}
		_ = health.Close()
	}()
	return nil
}

// startTypha is realPrograms' Typha: its process starts, and until it can
// read its configuration and reach the datastore it retries every second
// and listens on nothing, as Typha does (typha/pkg/daemon/daemon.go,
// projectcalico/calico v3.30.7 74485ea4: InitializeAndServeForever runs
// LoadConfiguration, whose config loop and EnsureInitialized retry every
// second, before Start opens the sync server and the health server). So
// while its cluster is not run here yet (a node resumed from its disk
// boots before its control plane is known) or the API server does not
// answer, a Felix that dials it is refused and tries another Typha, and
// the probes of 9098 fail: the pod is not Ready and leaves the Service's
// endpoints. (A simulated container would serve the plain page on 5473
// and 9098: Typha's HTTP readiness probe passes, and every Felix that
// dials it waits for a handshake until its read times out.)
func (r *Runtime) startTypha(ctx context.Context, m *machine, pod *corev1.Pod, c corev1.Container, addr netip.Addr) bool {
	who := fmt.Sprintf("%s/%s %s", pod.Namespace, pod.Name, c.Name)
	go func() {
		last := ""
		for {
			r.mu.Lock()
			wc := r.clusters[m.endpoint]
			r.mu.Unlock()
			err := errors.New("the cluster's control plane is not run here yet")
			if wc != nil {
				err = r.runTypha(ctx, m, wc, pod, c, addr)
			}
			if err == nil || ctx.Err() != nil {
				return
			}
			if msg := err.Error(); msg != last {
				m.logs.Write(vmdisk.Containerd, "%s: calico-typha: Failed to load configuration (retrying every second): %v", who, err)
				last = msg
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(typhaConfigRetry):
			}
		}
	}()
	return true
}

// typhaConfigRetry is the pause of Typha's config loop after a failure
// (daemon.go LoadConfiguration, v3.30.7: time.Sleep(1 * time.Second)).
const typhaConfigRetry = time.Second

// typhaCounter is GetNumTyphas (typha/pkg/k8s/lookup.go, v3.30.7): the
// ready addresses of the Service's Endpoints that have Typha's port, read
// with Typha's own token; the node count comes from its Felix cache
// (typha/pkg/calc/node_counter.go), with no API call.
func typhaCounter(cfg *rest.Config, admin kubernetes.Interface, ns, svc, portName string, felix *typha.Cache) func(context.Context) (int, int, error) {
	rc := rest.CopyConfig(cfg)
	rc.WarningHandler = rest.NoWarnings{} // v1 Endpoints' deprecation warning, which Typha's client-go logs once
	cs, err := kubernetes.NewForConfig(rc)
	return func(ctx context.Context) (int, int, error) {
		if err != nil {
			return 0, 0, err
		}
		addrs, err := discoverTyphas(ctx, cs, admin, ns, svc, portName)
		if err != nil {
			return 0, 0, err
		}
		return len(addrs), felix.Count(nodesKind), nil
	}
}

// nodesKind is how the Felix syncer's cache names nodes (Watch.String).
const nodesKind = "nodes"

// typhaAddrs are the ready addresses of the Typha Service's Endpoints on
// its port named portName, as Typha's discoverer reads them
// (typha/pkg/discovery/discovery.go, v3.30.7: core/v1 Endpoints, not
// EndpointSlices; no ready address is ErrServiceNotReady).
func typhaAddrs(ctx context.Context, cs kubernetes.Interface, ns, svc, portName string) ([]typha.Addr, error) {
	eps, err := cs.CoreV1().Endpoints(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []typha.Addr
	for _, sub := range eps.Subsets {
		var port int32
		for _, p := range sub.Ports {
			if p.Name == portName {
				port = p.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, a := range sub.Addresses {
			node := ""
			if a.NodeName != nil {
				node = *a.NodeName
			}
			out = append(out, typha.Addr{Addr: net.JoinHostPort(a.IP, strconv.Itoa(int(port))), NodeName: node})
		}
	}
	if len(out) == 0 {
		return nil, errNoTypha
	}
	return out, nil
}

// errNoTypha is Typha's ErrServiceNotReady, worded as it logs it.
var errNoTypha = errors.New("Kubernetes service missing IP or port")

// discoverTyphas is typhaAddrs with own (the component's token), and,
// where the Endpoints have no ready address, the ready pods the Service
// selects whose address is a loopback one, read with admin (the
// runtime's). The local world's nodes have loopback addresses, so a
// host-network pod's IP is one, and the API server refuses those in
// Endpoints and EndpointSlices ("may not be in the loopback range"): the
// endpoints controllers never write a Typha of this world, where on
// Azure they would write its node's private address. The runtime stands
// in for them, as kube-proxy's cluster does for the kubernetes Service
// (kubeproxy.Cluster.SetAPIServer); the component's own request, and its
// rights, are still the GET of the Endpoints.
func discoverTyphas(ctx context.Context, own, admin kubernetes.Interface, ns, svc, portName string) ([]typha.Addr, error) {
	addrs, err := typhaAddrs(ctx, own, ns, svc, portName)
	if !errors.Is(err, errNoTypha) || admin == nil {
		return addrs, err
	}
	if more, lerr := loopbackTyphas(ctx, admin, ns, svc, portName); lerr == nil && len(more) > 0 {
		return more, nil
	}
	return nil, err
}

// loopbackTyphas are the ready pods of the Service's selector with a
// loopback pod IP, on the target port of its port named portName, as the
// endpoints controller would list them (kubernetes
// pkg/controller/endpoint/endpoints_controller.go: ready, not being
// deleted, the port resolved by name from the pod's containers).
func loopbackTyphas(ctx context.Context, admin kubernetes.Interface, ns, svc, portName string) ([]typha.Addr, error) {
	s, err := admin.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil || len(s.Spec.Selector) == 0 {
		return nil, err
	}
	var target *corev1.ServicePort
	for i := range s.Spec.Ports {
		if s.Spec.Ports[i].Name == portName {
			target = &s.Spec.Ports[i]
		}
	}
	if target == nil {
		return nil, nil
	}
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(s.Spec.Selector).String()})
	if err != nil {
		return nil, err
	}
	var out []typha.Addr
	for _, p := range pods.Items {
		ip, perr := netip.ParseAddr(p.Status.PodIP)
		if perr != nil || !ip.IsLoopback() || p.DeletionTimestamp != nil || !podReady(&p) {
			continue
		}
		port := int32(target.TargetPort.IntValue())
		if target.TargetPort.Type == intstr.String {
			port = 0
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == target.TargetPort.StrVal {
						port = cp.ContainerPort
					}
				}
			}
		}
		if port == 0 {
			continue
		}
		out = append(out, typha.Addr{Addr: net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), NodeName: p.Spec.NodeName})
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// resolvedEnv is the container's environment as the kubelet gives it.
func resolvedEnv(ctx context.Context, admin kubernetes.Interface, pod *corev1.Pod, c corev1.Container) (map[string]string, error) {
	vars, err := containerruntime.Environment(ctx, admin, pod, c)
	if err != nil {
		return nil, err
	}
	env := make(map[string]string, len(vars))
	for _, v := range vars {
		env[v.Name] = v.Value
	}
	return env, nil
}

// typhaFeed turns one syncer's lists and watch events into its cache's
// updates: a list (the first, or again after a watch's history expired)
// is compared with what the cache holds of that kind, as the watcher
// cache resyncs (libcalico-go/lib/backend/watchersyncer/watchercache.go,
// v3.30.7), so only changes and deletions go out.
type typhaFeed struct {
	cache *typha.Cache
	mu    sync.Mutex
	keys  map[string]map[string]string // kind -> key -> revision
}

func objectKey(o *metav1.PartialObjectMetadata) string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

func (f *typhaFeed) list(w startneeds.Watch, items []metav1.PartialObjectMetadata) {
	kind := w.String()
	f.mu.Lock()
	defer f.mu.Unlock()
	old, now := f.keys[kind], make(map[string]string, len(items))
	var us []typha.Update
	for i := range items {
		k, rev := objectKey(&items[i]), items[i].ResourceVersion
		now[k] = rev
		if old[k] != rev {
			us = append(us, typha.Update{Kind: kind, Key: k, Revision: rev})
		}
	}
	for k := range old {
		if _, ok := now[k]; !ok {
			us = append(us, typha.Update{Kind: kind, Key: k, Deleted: true})
		}
	}
	f.keys[kind] = now
	for len(us) > 0 {
		n := min(len(us), typha.MaxMessageKVs)
		f.cache.Apply(us[:n]...)
		us = us[n:]
	}
}

func (f *typhaFeed) event(w startneeds.Watch, typ watch.EventType, o *metav1.PartialObjectMetadata) {
	kind, k := w.String(), objectKey(o)
	u := typha.Update{Kind: kind, Key: k, Revision: o.ResourceVersion, Deleted: typ == watch.Deleted}
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.keys[kind]
	if keys == nil {
		keys = map[string]string{}
		f.keys[kind] = keys
	}
	if u.Deleted {
		delete(keys, k)
	} else {
		keys[k] = u.Revision
	}
	f.cache.Apply(u)
}

// isTypha says whether a container runs Typha's image.
func isTypha(c corev1.Container) bool { return registry.Repository(c.Image) == typhaRepo }
