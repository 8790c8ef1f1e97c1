package machines

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/startneeds"
)

// agent is a CNI agent's sync as the runtime reads it (componentState).
type agent struct{ in atomic.Bool }

func (a *agent) Synced() bool { return a.in.Load() }
func (a *agent) NotSynced() string {
	if a.in.Load() {
		return ""
	}
	return "via Typha: Felix exits (connection to Typha failed: EOF); its supervisor starts it again"
}
func (a *agent) Done() <-chan struct{} { return nil }
func (a *agent) Stop()                 {}
func (a *agent) Reads() int64          { return 0 }

// TestPodRoutesOutliveTheAgent: a node's routes to another node's pods
// exist once both CNI agents have been in sync; an agent that then leaves
// sync (Felix restarted after losing Typha) leaves them in place, but a
// node that joins while it is out of sync is reached only once it is in
// sync again, and an agent that was never in sync programs no route.
func TestPodRoutesOutliveTheAgent(t *testing.T) {
	r := &Runtime{opts: Options{Log: logr.Discard()}, machines: map[string]*machine{}, clusters: map[string]*workloadCluster{},
		halted: map[string]string{}, proxies: kubeProxies{all: map[string]*sharedProxy{}}}
	felix := &startneeds.Component{Name: "calico-node", Effect: startneeds.EffectPodRoutes}
	node := func(name, cidr string) (*machine, *agent) {
		m := &machine{arm: arm.Machine{Name: name, ID: "/test/" + name}, nodeName: name, endpoint: "127.0.0.1:6443"}
		p := netip.MustParsePrefix(cidr)
		m.podCIDR = func() netip.Prefix { return p }
		a := &agent{}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "calico-node-" + name, UID: types.UID(name)}}
		m.sessions = map[types.UID][]*componentSession{pod.UID: {{comp: felix, pod: pod, s: a}}}
		r.machines[key(m.arm.ID)] = m
		return m, a
	}
	sync := func(m *machine, a *agent, in bool) {
		a.in.Store(in)
		r.podRoutesSynced(m, in)
	}
	reaches := func(from *machine, pod string) error { return r.podRoute(from, netip.MustParseAddr(pod)) }

	lin, linAgent := node("lin", "192.168.1.0/24")
	win, winAgent := node("win", "192.168.2.0/24")
	if err := reaches(lin, "192.168.2.5"); err == nil || !strings.Contains(err.Error(), "no route to host") {
		t.Fatalf("a node reaches another's pod before either CNI agent was in sync: %v", err)
	}
	sync(lin, linAgent, true)
	if err := reaches(lin, "192.168.2.5"); err == nil {
		t.Fatal("a node reaches the pod of a node whose agent was never in sync (it has no route back)")
	}
	sync(win, winAgent, true)
	if err := reaches(lin, "192.168.2.5"); err != nil {
		t.Fatalf("both agents in sync: %v", err)
	}

	// Felix on the Windows node loses Typha and restarts.
	sync(win, winAgent, false)
	for _, c := range []struct {
		from *machine
		pod  string
	}{{lin, "192.168.2.5"}, {win, "192.168.1.5"}} {
		if err := reaches(c.from, c.pod); err != nil {
			t.Errorf("%s to %s while the Windows node's agent restarts: %v; the routes it programmed stay in the kernel", c.from.nodeName, c.pod, err)
		}
	}

	// A node that joins meanwhile is not among those routes.
	fresh, freshAgent := node("fresh", "192.168.3.0/24")
	sync(fresh, freshAgent, true)
	if err := reaches(fresh, "192.168.2.5"); err == nil {
		t.Error("a node that joined while the Windows node's agent was out of sync reaches its pods: the Windows node has no route back to the new node")
	}
	if err := reaches(lin, "192.168.3.5"); err != nil {
		t.Errorf("the Linux node, in sync, does not reach the new node's pod: %v", err)
	}
	sync(win, winAgent, true)
	if err := reaches(fresh, "192.168.2.5"); err != nil {
		t.Errorf("the Windows node's agent is in sync again: %v", err)
	}

	// The DaemonSet replaces the Linux node's calico-node: between the
	// old pod's end and the new one's start the routes stay.
	r.stopSessions(lin, "lin")
	if err := reaches(lin, "192.168.2.5"); err != nil {
		t.Errorf("while its calico-node pod is replaced, the Linux node lost its routes: %v", err)
	}

	// A node whose calico-node has not started yet, in a cluster whose
	// other nodes run one, has none.
	bare, _ := node("bare", "192.168.4.0/24")
	bare.sessions = nil
	if err := reaches(bare, "192.168.2.5"); err == nil || !strings.Contains(err.Error(), "its CNI agent is not running") {
		t.Errorf("a node without its CNI agent reaches another node's pod: %v", err)
	}
	if err := reaches(win, "192.168.4.5"); err == nil {
		t.Error("a node reaches the pod of a node without its CNI agent (it has no route back)")
	}
}
