package upgrade_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/upgrade"
)

// storedUnpinned labels the objects the tests store without
// windowsServerVersion: winkube's defaulting webhook pins the release of
// every template it admits, so an unpinned one is what a cluster keeps from
// before it (or from a path around it); the tests store one by exempting
// objects with this label from the defaulting.
const storedUnpinned = "upgrade-test.winkube.dev/stored-unpinned"

var exemptOnce sync.Once

// exemptFromDefaulting turns the defaulting of AzureMachineTemplates and
// AzureMachinePools off for objects labelled storedUnpinned.
func exemptFromDefaulting(t *testing.T) {
	t.Helper()
	exemptOnce.Do(func() {
		ctx := context.Background()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			list := &admissionv1.MutatingWebhookConfigurationList{}
			if err := env.Client.List(ctx, list); err != nil {
				return err
			}
			for i := range list.Items {
				cfg := &list.Items[i]
				changed := false
				for j := range cfg.Webhooks {
					w := &cfg.Webhooks[j]
					if !strings.HasPrefix(w.Name, "default.azuremachinetemplate.") && !strings.HasPrefix(w.Name, "default.azuremachinepool.") {
						continue
					}
					w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: storedUnpinned, Operator: metav1.LabelSelectorOpDoesNotExist}}}
					changed = true
				}
				if changed {
					if err := env.Client.Update(ctx, cfg); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("exempting the tests' unpinned templates from defaulting: %v", err)
		}
	})
}

// unpinnedWindowsTemplate moves the Windows MachineDeployment to a copy of
// its AzureMachineTemplate without windowsServerVersion and returns the
// copy's name.
func (f *fixture) unpinnedWindowsTemplate() string {
	f.t.Helper()
	exemptFromDefaulting(f.t)
	ctx := context.Background()
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
		f.t.Fatal(err)
	}
	amt := &infrav1.AzureMachineTemplate{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, amt); err != nil {
		f.t.Fatal(err)
	}
	name := windowsMD + "-unpinned"
	poll.Until(f.t, 30*time.Second, func() string {
		// The API server takes the webhook's new selector a moment later:
		// until then the defaulting pins what is stored.
		n := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{storedUnpinned: "true"}}, Spec: amt.Spec}
		for k, v := range amt.Labels {
			n.Labels[k] = v
		}
		n.Spec.Template.Spec.WindowsServerVersion = ""
		if err := f.c.Create(ctx, n); err != nil {
			return err.Error()
		}
		if got := n.Spec.Template.Spec.WindowsServerVersion; got != "" {
			_ = f.c.Delete(ctx, n)
			poll.Until(f.t, 30*time.Second, func() string {
				if err := f.c.Get(ctx, client.ObjectKeyFromObject(n), n); err == nil {
					return "the pinned template is not gone yet"
				}
				return ""
			})
			return "the template was stored pinned to " + string(got)
		}
		return ""
	})
	md.Spec.Template.Spec.InfrastructureRef.Name = name
	if err := f.c.Update(ctx, md); err != nil {
		f.t.Fatal(err)
	}
	return name
}

// unpinnedPool removes windowsServerVersion from the Windows MachinePool's
// AzureMachinePool.
func (f *fixture) unpinnedPool() {
	f.t.Helper()
	exemptFromDefaulting(f.t)
	ctx := context.Background()
	poll.Until(f.t, 30*time.Second, func() string {
		amp := &infrav1.AzureMachinePool{}
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMP}, amp); err != nil {
			return err.Error()
		}
		if amp.Spec.Template.WindowsServerVersion == "" {
			return ""
		}
		if amp.Labels == nil {
			amp.Labels = map[string]string{}
		}
		amp.Labels[storedUnpinned] = "true"
		amp.Spec.Template.WindowsServerVersion = ""
		if err := f.c.Update(ctx, amp); err != nil {
			return err.Error()
		}
		return "the pool was stored pinned to " + string(amp.Spec.Template.WindowsServerVersion)
	})
}

// poolNode adds a workload node of the Windows MachinePool the way Cluster
// API lists it when the pool makes no Machines: in status.nodeRefs only.
func (f *fixture) poolNode(name, build, kubelet string) {
	f.t.Helper()
	ctx := context.Background()
	name = f.ns + "-" + name
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows", "node.kubernetes.io/windows-build": build}}}
	if err := f.c.Create(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	n.Status.NodeInfo.KubeletVersion = kubelet
	if err := f.c.Status().Update(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mp := &clusterv1.MachinePool{}
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMP}, mp); err != nil {
			return err
		}
		mp.Status.NodeRefs = append(mp.Status.NodeRefs, corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name})
		return f.c.Status().Update(ctx, mp)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func windowsReleaseFindings(p *upgrade.Plan) []upgrade.Finding {
	var out []upgrade.Finding
	for _, fd := range p.Findings {
		if fd.Check == upgrade.CheckWindowsRelease {
			out = append(out, fd)
		}
	}
	return out
}

// TestPlanPinsAnUnpinnedWindowsTemplate: a Windows MachineDeployment whose
// AzureMachineTemplate names no windowsServerVersion, its node on Windows
// Server 2022: the plan's step writes the new template pinned to 2022 (an
// info line says so, no warning), and --apply stores it so. Before, the
// plan only warned and wrote no new template, so the new machines took
// whatever default the provider had then.
func TestPlanPinsAnUnpinnedWindowsTemplate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	old := f.unpinnedWindowsTemplate()
	f.node(windowsMD, "win-a", "10.0.20348", "v1.35.4")
	p := f.plan("v1.36.3")
	want := old + "-v1-36-3"
	fs := windowsReleaseFindings(p)
	if len(fs) != 1 || fs[0].Severity != doctor.Info || fs[0].Object != "MachineDeployment/"+f.ns+"/"+windowsMD ||
		!strings.Contains(fs[0].Message, "the upgrade's new AzureMachineTemplate "+want+" pins Windows Server 2022, the release its nodes run (10.0.20348: "+f.ns+"-win-a)") {
		t.Fatalf("windows-server-version findings %+v, want one info line naming the pin of %s", fs, want)
	}
	last := p.Steps[len(p.Steps)-1]
	if last.Name != windowsMD || last.NewTemplate != want || last.Windows != infrav1.WindowsServer2022 ||
		!strings.Contains(last.Manifest, "windowsServerVersion: \"2022\"") || !strings.Contains(last.Manifest, "infrastructureRef:\n        name: "+want) {
		t.Fatalf("the Windows pool's step does not write %s pinned to 2022:\n%+v\n%s", want, last, last.Manifest)
	}
	if p.ExitCode() == 2 {
		t.Fatalf("the plan has errors: %+v", p.Findings)
	}

	f.rollOut()
	amt := &infrav1.AzureMachineTemplate{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: want}, amt); err != nil {
		t.Fatal(err)
	}
	// The copy keeps the test's label, so the defaulting left it alone:
	// the release is the plan's.
	if amt.Labels[storedUnpinned] == "" || amt.Spec.Template.Spec.WindowsServerVersion != infrav1.WindowsServer2022 {
		t.Errorf("the new template %s is stored with labels %v and windowsServerVersion %q, want the plan's pin 2022", want, amt.Labels, amt.Spec.Template.Spec.WindowsServerVersion)
	}
	md := &clusterv1.MachineDeployment{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMD}, md); err != nil {
		t.Fatal(err)
	}
	if ref := md.Spec.Template.Spec.InfrastructureRef.Name; ref != want {
		t.Errorf("the Windows pool uses AzureMachineTemplate %s, want %s", ref, want)
	}
}

// TestPlanPinsAnUnpinnedMachinePool: the same for a Windows MachinePool,
// whose node Cluster API lists in the pool's status.nodeRefs only: the
// step's change of the AzureMachinePool pins 2022, and --apply makes it.
// Before, the pool's nodes were not read (only Machines were) and nothing
// was pinned.
func TestPlanPinsAnUnpinnedMachinePool(t *testing.T) {
	ctx := context.Background()
	f := newPoolFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	f.unpinnedPool()
	f.poolNode("mp-a", "10.0.20348", "v1.35.4")
	p := f.plan("v1.36.3")
	fs := windowsReleaseFindings(p)
	if len(fs) != 1 || fs[0].Severity != doctor.Info ||
		!strings.Contains(fs[0].Message, "the upgrade's change of AzureMachinePool "+windowsMP+" pins Windows Server 2022, the release its nodes run (10.0.20348: "+f.ns+"-mp-a)") {
		t.Fatalf("windows-server-version findings %+v, want one info line naming the pin", fs)
	}
	last := p.Steps[len(p.Steps)-1]
	if last.Kind != "MachinePool" || !strings.Contains(last.Manifest, "kind: AzureMachinePool") || !strings.Contains(last.Manifest, "windowsServerVersion: \"2022\"") {
		t.Fatalf("the Windows pool's step does not pin its AzureMachinePool:\n%+v\n%s", last, last.Manifest)
	}
	f.rollOut()
	amp := &infrav1.AzureMachinePool{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: windowsMP}, amp); err != nil {
		t.Fatal(err)
	}
	if amp.Labels[storedUnpinned] == "" || amp.Spec.Template.WindowsServerVersion != infrav1.WindowsServer2022 {
		t.Errorf("the AzureMachinePool is stored with labels %v and windowsServerVersion %q, want the plan's pin 2022", amp.Labels, amp.Spec.Template.WindowsServerVersion)
	}
}

// TestPlanRefusesToPinAPoolOfTwoReleases: an unpinned Windows template
// whose nodes run 2019 and 2022 cannot be pinned: one error names both
// releases and their nodes.
func TestPlanRefusesToPinAPoolOfTwoReleases(t *testing.T) {
	f := newFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	f.unpinnedWindowsTemplate()
	f.node(windowsMD, "w2019", "10.0.17763", "v1.35.4")
	f.node(windowsMD, "w2022", "10.0.20348", "v1.35.4")
	p := f.plan("v1.36.3")
	fs := windowsReleaseFindings(p)
	want := "its nodes run two releases, Windows Server 2019 (" + f.ns + "-w2019) and Windows Server 2022 (" + f.ns + "-w2022)"
	if len(fs) != 1 || fs[0].Severity != doctor.Error || !strings.Contains(fs[0].Message, want) || fs[0].Fix == "" {
		t.Fatalf("windows-server-version findings %+v, want one error saying %q", fs, want)
	}
	if last := p.Steps[len(p.Steps)-1]; last.NewTemplate != "" {
		t.Errorf("the plan writes template %s for a pool it cannot pin", last.NewTemplate)
	}
}

// TestPlanReadsMachinePoolNodes: a MachinePool's nodes count for its pool
// whether Cluster API lists them in status.nodeRefs or as Machines
// labelled with the pool's name; a 2019 node of a 2022 pool is an error
// either way. Before, only Machines of MachineDeployments and
// MachinePools were read, so the node in status.nodeRefs went unseen.
func TestPlanReadsMachinePoolNodes(t *testing.T) {
	f := newPoolFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	f.poolNode("ref-2019", "10.0.17763", "v1.35.4")
	p := f.plan("v1.36.3")
	says := func(node string) bool {
		for _, fd := range findings(p, upgrade.CheckWindowsRelease, doctor.Error) {
			if fd.Object == "MachinePool/"+f.ns+"/"+windowsMP && strings.Contains(fd.Message, "node "+f.ns+"-"+node+" runs Windows Server 2019 (10.0.17763) but the pool's template boots Windows Server 2022") {
				return true
			}
		}
		return false
	}
	if !says("ref-2019") {
		t.Errorf("no error for the pool's node in status.nodeRefs: %+v", p.Findings)
	}
	f.node(windowsMP, "machine-2019", "10.0.17763", "v1.35.4")
	// f.node labels the Machine as a MachineDeployment's: relabel it as
	// the pool's, as Cluster API's MachinePool controller does.
	ctx := context.Background()
	m := &clusterv1.Machine{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.ns + "-machine-2019"}, m); err != nil {
		t.Fatal(err)
	}
	delete(m.Labels, clusterv1.MachineDeploymentNameLabel)
	m.Labels[clusterv1.MachinePoolNameLabel] = windowsMP
	if err := f.c.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	p = f.plan("v1.36.3")
	if !says("ref-2019") || !says("machine-2019") {
		t.Errorf("not both of the pool's 2019 nodes named: %+v", p.Findings)
	}
}

// TestPlanChecksMachinePoolKubeletSkew: a MachinePool node (in the pool's
// status.nodeRefs) whose kubelet is four minors behind the target is a
// version-skew error, as a Machine's node is. Before, only Machines' nodes
// were checked.
func TestPlanChecksMachinePoolKubeletSkew(t *testing.T) {
	f := newPoolFixture(t, "v1.35.4", infrav1.WindowsServer2022)
	f.poolNode("old-kubelet", "10.0.20348", "v1.32.13")
	p := f.plan("v1.36.3")
	for _, fd := range findings(p, upgrade.CheckSkew, doctor.Error) {
		if fd.Object == "Node/"+f.ns+"-old-kubelet" && strings.Contains(fd.Message, "its kubelet runs v1.32.13, 4 minors behind v1.36.3") {
			return
		}
	}
	t.Errorf("no version-skew error for the pool's node with a v1.32.13 kubelet: %+v", p.Findings)
}
