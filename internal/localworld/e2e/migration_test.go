//go:build e2e

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/cli"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/winupgrade"
)

const (
	build2019 = "10.0.17763"
	build2022 = "10.0.20348"
	iis2019   = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019"
	iis2022   = "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022"
	// iisAny's manifest list has a 2019, a 2022 and a 2025 image.
	iisAny = "mcr.microsoft.com/windows/servercore/iis:latest"
)

// checkMoveOff2019 is issue 36's walkthrough, in a world whose Windows
// workers run Windows Server 2019: the plan names the seeds' iis-1809 as
// what breaks (with its ltsc2022 tag as the fix) and a multi-build image as
// safe; the 2022 pool it writes is applied; the old pool is scaled to 0, so
// Cluster API drains its node, and the drain waits on a
// PodDisruptionBudget; the multi-build workload moves to the 2022 node,
// iis-1809 waits with the event naming the tag; retagged, it runs; and the
// 2019 VMs are gone from Azure.
func checkMoveOff2019(ctx context.Context, t *testing.T, w *localworld.World, o localworld.Options, start time.Time) {
	t.Helper()
	cfg, _, err := w.Workload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	wc, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if err := w.WaitAdmissionServed(ctx); err != nil {
		t.Fatal(err)
	}

	// The workloads of a 2019 cluster: iis-1809 runs only on 2019; iis-any
	// runs anywhere, two replicas of which one may be down at a time.
	windowsDeployment := func(name, image string, replicas int32) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
				Containers:   []corev1.Container{{Name: "iis", Image: image}}}}}}
	}
	for _, obj := range []client.Object{
		windowsDeployment("iis-1809", iis2019, 1),
		windowsDeployment("iis-any", iisAny, 2),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "iis-any"}, Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "iis-any"}}}},
	} {
		if err := wc.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	running := func(app string, n int, build string) string {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return err.Error()
		}
		got := 0
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			node, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if b := node.Labels[corev1.LabelWindowsBuild]; b != build {
				return fmt.Sprintf("%s's pod %s runs on %s, of build %s, want %s", app, p.Name, node.Name, b, build)
			}
			got++
		}
		if got != n || len(pods.Items) != n {
			return fmt.Sprintf("%s: %d of %d pods running, want %d", app, got, len(pods.Items), n)
		}
		return ""
	}
	poll.Until(t, 2*time.Minute, func() string {
		if s := running("iis-1809", 1, build2019); s != "" {
			return s
		}
		return running("iis-any", 2, build2019)
	})
	logf("iis-1809 and iis-any run on the 2019 node")

	// The plan, as a user runs it against the world (whose kubeconfigs
	// 'winkube up' writes).
	if _, _, err := w.WriteKubeconfigs(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, err := runWinkube(ctx, "plan", "windows-upgrade", "--to", "2022", "--state-dir", o.StateDir, "--write-to", dir, "-o", "json")
	var status cli.ExitStatus
	if !errors.As(err, &status) || status != 2 {
		t.Fatalf("the plan ended with %v, want exit status 2 (an image that breaks); it printed:\n%s", err, out)
	}
	var plan winupgrade.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("the plan's JSON: %v\n%s", err, out)
	}
	if len(plan.Leaving[build2019]) != 1 {
		t.Errorf("the plan's leaving nodes: %v, want the one 2019 node", plan.Leaving)
	}
	images := map[string]winupgrade.Image{}
	for _, im := range plan.Images {
		images[im.Workload] = im
	}
	if im := images["Deployment/default/iis-1809"]; im.RunsOnTarget || im.Use != iis2022 {
		t.Errorf("the plan says of iis-1809: %+v; want it not to run on 2022, with %s to use", im, iis2022)
	}
	if im := images["Deployment/default/iis-any"]; !im.RunsOnTarget || im.Use != "" || im.Error != "" {
		t.Errorf("the plan says of iis-any: %+v; want it safe on 2022", im)
	}
	if len(plan.Pools) != 1 || plan.Pools[0].Kind != "MachineDeployment" || plan.Pools[0].From != infrav1.WindowsServer2019 {
		t.Fatalf("the plan's pools: %+v, want the one 2019 MachineDeployment", plan.Pools)
	}
	oldMD, newMD := plan.Pools[0].Name, plan.Pools[0].NewName
	// The table a user reads (the README shows it), in the test's log.
	text, _ := runWinkube(ctx, "plan", "windows-upgrade", "--to", "2022", "--state-dir", o.StateDir)
	t.Logf("winkube plan windows-upgrade --to 2022:\n%s", text)
	logf("the plan: iis-1809 -> %s, iis-any safe, new pool %s beside %s", images["Deployment/default/iis-1809"].Use, newMD, oldMD)

	// The new pool, applied as written, joins with the target's build;
	// nothing has moved yet.
	applyManifest(ctx, t, w.Client, filepath.Join(dir, newMD+".yaml"))
	poll.Until(t, 3*time.Minute, func() string {
		if s := poolNodes(ctx, w, cs, newMD, 1, build2022); s != "" {
			return s
		}
		return running("iis-any", 2, build2019)
	})
	logf("the 2022 pool %s is Ready; the workloads have not moved", newMD)

	// Scale the old pool to 0: Cluster API cordons and drains its node,
	// evicting through the Eviction API, which refuses the second iis-any
	// pod until the first one's replacement is ready elsewhere.
	var oldVMs []string
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: oldMD}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		oldVMs = append(oldVMs, strings.TrimPrefix(m.Spec.ProviderID, "azure://"))
	}
	if len(oldVMs) != 1 {
		t.Fatalf("the 2019 pool's machines: %v", oldVMs)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		md := &clusterv1.MachineDeployment{}
		if err := w.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: oldMD}, md); err != nil {
			return err
		}
		md.Spec.Replicas = ptr.To[int32](0)
		return w.Client.Update(ctx, md)
	})
	if err != nil {
		t.Fatal(err)
	}
	budgetHeld, neverDown := false, true
	poll.Until(t, 4*time.Minute, func() string {
		ms := &clusterv1.MachineList{}
		if err := w.Client.List(ctx, ms, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: oldMD}); err != nil {
			return err.Error()
		}
		for _, m := range ms.Items {
			for _, c := range m.Status.Conditions {
				if c.Type == clusterv1.MachineDeletingCondition && strings.Contains(c.Message, "disruption budget") {
					budgetHeld = true
				}
			}
		}
		if pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-any"}); err == nil {
			ready := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
						ready++
					}
				}
			}
			neverDown = neverDown && ready > 0
		}
		if len(ms.Items) != 0 {
			return fmt.Sprintf("the 2019 pool still has %d machines", len(ms.Items))
		}
		return running("iis-any", 2, build2022)
	})
	if !budgetHeld {
		t.Error("no Machine of the drained pool said the drain waited on iis-any's disruption budget")
	}
	if !neverDown {
		t.Error("every iis-any pod was down at once during the drain, which its budget forbids")
	}
	logf("the 2019 pool drained within iis-any's budget; iis-any runs on 2022")

	// iis-1809's evicted pod waits, and says which tag runs here.
	poll.Until(t, 2*time.Minute, func() string {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=iis-1809"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "" {
			return fmt.Sprintf("iis-1809: want one pod, unscheduled (%v)", err)
		}
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pods.Items[0].Name})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "NoWindowsNodeOfBuild" && strings.Contains(e.Message, "image "+iis2022+" instead of "+iis2019) {
				return ""
			}
		}
		return fmt.Sprintf("no event names %s for the waiting iis-1809 pod (%d events)", iis2022, len(evs.Items))
	})
	logf("iis-1809 waits, its event naming %s", iis2022)

	// Retagged as the plan and the event say, it runs on 2022; the 2019
	// VM is gone from Azure.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := wc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "iis-1809"}, d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = iis2022
		return wc.Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		if s := running("iis-1809", 1, build2022); s != "" {
			return s
		}
		for _, id := range w.Emulator().ResourceIDs() {
			for _, vm := range oldVMs {
				if strings.EqualFold(id, vm) {
					return "the 2019 VM is still in Azure: " + vm
				}
			}
		}
		return ""
	})
	logf("iis-1809 retagged runs on 2022; the 2019 VM is gone")
}

// runWinkube runs winkube's command line in this process.
func runWinkube(ctx context.Context, args ...string) (string, error) {
	cmd := cli.NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// applyManifest creates every object of a YAML file in the management
// cluster, as kubectl create -f would.
func applyManifest(ctx context.Context, t *testing.T, c client.Client, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s from %s: %v", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// poolNodes says what keeps a MachineDeployment from having n Ready nodes
// of a Windows build.
func poolNodes(ctx context.Context, w *localworld.World, cs kubernetes.Interface, md string, n int, build string) string {
	ms := &clusterv1.MachineList{}
	if err := w.Client.List(ctx, ms, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}); err != nil {
		return err.Error()
	}
	ready := 0
	for _, m := range ms.Items {
		if !m.Status.NodeRef.IsDefined() {
			continue
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if node.Labels[corev1.LabelWindowsBuild] != build {
			return fmt.Sprintf("node %s of %s has build %q, want %s", node.Name, md, node.Labels[corev1.LabelWindowsBuild], build)
		}
		if util.IsNodeReady(node) {
			ready++
		}
	}
	if ready != n || len(ms.Items) != n {
		return fmt.Sprintf("%s: %d machines, %d Ready nodes; want %d", md, len(ms.Items), ready, n)
	}
	return ""
}
