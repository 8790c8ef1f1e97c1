package webhooks_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// A Windows release changes by a new pool beside the old one: a template's
// change of windowsServerVersion, and a pool's while it has instances, are
// refused with the way to do it; a pool without instances may change.
func TestWindowsReleaseDoesNotChangeInPlace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "release")
	windows := infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}, WindowsServerVersion: infrav1.WindowsServer2019}

	tpl := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "win", Namespace: ns},
		Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{Spec: infrav1.AzureMachineSpec{AzureVMSpec: windows}}}}
	if err := env.Client.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Spec.Template.Spec.WindowsServerVersion = infrav1.WindowsServer2022
	err := env.Client.Update(ctx, tpl)
	for _, want := range []string{"spec.template.spec.windowsServerVersion", `from "2019" to "2022"`, "winkube plan windows-upgrade --to 2022", "new pool beside this one"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("template release change: %v, want a refusal saying %q", err, want)
		}
	}

	busy := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns}, Spec: infrav1.AzureMachinePoolSpec{Template: windows}}
	idle := busy.DeepCopy()
	idle.Name = "idle"
	for _, mp := range []*infrav1.AzureMachinePool{busy, idle} {
		if err := env.Client.Create(ctx, mp); err != nil {
			t.Fatal(err)
		}
	}
	busy.Status.Replicas = 2
	if err := env.Client.Status().Update(ctx, busy); err != nil {
		t.Fatal(err)
	}
	busy.Spec.Template.WindowsServerVersion = infrav1.WindowsServer2025
	err = env.Client.Update(ctx, busy)
	for _, want := range []string{"spec.template.windowsServerVersion", `from "2019" to "2025" on a pool in use`, "--to 2025"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pool in use: %v, want a refusal saying %q", err, want)
		}
	}
	// Other changes of the pool in use still roll its instances.
	busy.Spec.Template.WindowsServerVersion = infrav1.WindowsServer2019
	busy.Spec.Template.VMSize = "Standard_D8s_v3"
	if err := env.Client.Update(ctx, busy); err != nil {
		t.Errorf("vmSize change of a pool in use: %v", err)
	}
	idle.Spec.Template.WindowsServerVersion = infrav1.WindowsServer2022
	if err := env.Client.Update(ctx, idle); err != nil {
		t.Errorf("release change of a pool without instances: %v", err)
	}
}

// Issue 54, finding 8: accelerated networking and identity edits of a pool
// in use are refused with the way to make them (a new pool); a pool without
// instances may change them.
func TestPoolInUseRefusesEditsItWouldNotRoll(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "poolnic")
	windows := infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}
	busy := &infrav1.AzureMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns}, Spec: infrav1.AzureMachinePoolSpec{Template: windows}}
	idle := busy.DeepCopy()
	idle.Name = "idle"
	for _, mp := range []*infrav1.AzureMachinePool{busy, idle} {
		if err := env.Client.Create(ctx, mp); err != nil {
			t.Fatal(err)
		}
	}
	busy.Status.Replicas = 2
	if err := env.Client.Status().Update(ctx, busy); err != nil {
		t.Fatal(err)
	}
	on := true
	for name, edit := range map[string]func(*infrav1.AzureVMSpec){
		"spec.template.acceleratedNetworking": func(s *infrav1.AzureVMSpec) { s.AcceleratedNetworking = &on },
		"spec.template.identity":              func(s *infrav1.AzureVMSpec) { s.Identity = infrav1.VMIdentitySystemAssigned },
	} {
		for _, mp := range []*infrav1.AzureMachinePool{busy, idle} {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
				t.Fatal(err)
			}
			changed := mp.DeepCopy()
			edit(&changed.Spec.Template)
			err := env.Client.Update(ctx, changed)
			switch {
			case mp == busy && (err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "create a new pool")):
				t.Errorf("%s of a pool in use: %v, want a refusal naming the field and a new pool", name, err)
			case mp == idle && err != nil:
				t.Errorf("%s of a pool without instances: %v", name, err)
			}
		}
	}
}
