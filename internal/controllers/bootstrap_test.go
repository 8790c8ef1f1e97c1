package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/controllers"
)

// A provisioned machine whose node does not register by the bootstrap
// deadline is reported failed with the cause and its log's end, read
// through Run Command, or through the serial console when the VM agent
// cannot run it; a node registering later clears it; a machine whose node
// registers in time is never looked into.
func TestBootstrapFailureIsReportedWithItsLog(t *testing.T) {
	parallel(t)
	const winLog = "2026-11-25 10:00:00.000 1234 INFO cloudbaseinit.plugins.common.userdataplugins.cloudconfig [-] Running runcmd\n" +
		// Secrets a bootstrap log carries, which no condition or Event
		// may repeat (the secrets list below).
		"+ kubeadm join 192.0.2.10:6443 --token q1w2e3.r4t5y6u7i8o9p0a1 --discovery-token-ca-cert-hash sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9 --control-plane --certificate-key 6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c\n" +
		"Downloading https://acct.blob.core.windows.net/k/k.zip?sv=2022-11-02&se=2026-12-01&sp=r&sig=U0FTc2lnbmF0dXJlMTIz%3D\n" +
		`{"aadClientId": "c", "aadClientSecret": "Cl13nt~S3cret.x"}` + "\n" +
		"-----BEGIN RSA PRIVATE KEY-----\nUFJJVkFURUtFWUJPRFk=\n-----END RSA PRIVATE KEY-----\n" +
		"[preflight] Running pre-flight checks\n" +
		"error execution phase preflight: couldn't validate the identity of the API Server: Get \"https://192.0.2.10:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp 192.0.2.10:6443: i/o timeout\n" +
		"To see the stack trace of this error execute with --v=5 or higher\n"
	const serial = "cloud-init[812]: + kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n" +
		"cloud-init[812]: 2026-11-25 10:00:00,001 - cc_scripts_user.py[WARNING]: Failed to run module scripts-user (scripts in /var/lib/cloud/instance/scripts)\n"
	runtime := &arm.RecordingRuntime{}
	runtime.Answer = func(id string, c arm.Command) (arm.CommandResult, error) {
		switch {
		case strings.HasSuffix(id, "/boot-md-w-qwert"):
			return arm.CommandResult{Stdout: winLog}, nil
		case strings.HasSuffix(id, "/boot-md-linux"):
			return arm.CommandResult{}, errors.New("the VM agent is not ready")
		}
		return arm.CommandResult{}, nil
	}
	runtime.Serial = func(id string) []byte {
		if strings.HasSuffix(id, "/boot-md-linux") {
			return []byte(serial)
		}
		return nil
	}
	_, armCfg := newEmulator(t, arm.Options{Runtime: runtime})
	stop := startControllersWith(t, armCfg, func(o *controllers.Options) { o.BootstrapTimeout = 3 * time.Second })
	defer stop()
	f := newCluster(t, "boot")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("boot-md-windows-qwert", false, true, "1")
	f.newMachine("boot-md-linux", false, false, "2")
	f.newMachine("boot-md-joins", false, false, "3")
	f.waitMachinesProvisioned(time.Minute, "boot-md-windows-qwert", "boot-md-linux", "boot-md-joins")
	setNodeRef(t, f, "boot-md-joins", "boot-md-joins")

	failed := func(name string) (*infrav1.AzureMachine, *metav1.Condition) {
		am := &infrav1.AzureMachine{}
		var cond *metav1.Condition
		env.Until(t, time.Minute, func(r client.Reader) string {
			if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, am); err != nil {
				return err.Error()
			}
			cond = conditions.Get(am, controllers.BootstrapSucceededCondition)
			if cond == nil || cond.Reason != controllers.BootstrapFailedReason {
				return fmt.Sprintf("%s's BootstrapSucceeded: %+v", name, cond)
			}
			return ""
		})
		return am, cond
	}
	am, cond := failed("boot-md-windows-qwert")
	for _, want := range []string{
		"error execution phase preflight: couldn't validate the identity of the API Server",
		`Cloudbase-Init\log\cloudbase-init.log, read through Run Command`,
		"To see the stack trace of this error",
	} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("the Windows machine's condition says\n%s\nwant it to contain %q", cond.Message, want)
		}
	}
	secrets := []string{"r4t5y6u7i8o9p0a1", "6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c", "U0FTc2lnbmF0dXJlMTIz", "Cl13nt~S3cret.x", "UFJJVkFURUtFWUJPRFk="}
	noSecret := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s repeats the secret %q of the bootstrap log:\n%s", what, s, text)
			}
		}
	}
	if !strings.Contains(cond.Message, "--token [REDACTED]") || !strings.Contains(cond.Message, "sig=[REDACTED]") {
		t.Errorf("the Windows machine's condition lost the log's lines instead of their secrets:\n%s", cond.Message)
	}
	noSecret("the Windows machine's BootstrapSucceeded condition", cond.Message)
	for _, c := range am.Status.Conditions {
		noSecret("condition "+c.Type, c.Message)
	}
	if r := conditions.Get(am, controllers.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse || r.Reason != controllers.BootstrapFailedReason ||
		!strings.Contains(r.Message, "i/o timeout") || strings.Contains(r.Message, "\n") {
		t.Errorf("the Windows machine's Ready condition: %+v, want False/BootstrapFailed with the cause on one line", r)
	}
	_, cond = failed("boot-md-linux")
	for _, want := range []string{"Failed to run module scripts-user", "the serial console (boot diagnostics; Run Command failed:", "the VM agent is not ready"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("the Linux machine's condition says\n%s\nwant it to contain %q", cond.Message, want)
		}
	}

	// The script Run Command was given reads the log's end, as the OS
	// names it.
	var windowsScript, linuxScript bool
	for _, c := range runtime.Commands() {
		s := strings.Join(c.Script, "\n")
		windowsScript = windowsScript || (c.Shell == arm.ShellPowerShell && strings.Contains(s, `Get-Content -Path 'C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\cloudbase-init.log' -Tail`))
		linuxScript = linuxScript || (c.Shell == arm.ShellSh && strings.Contains(s, "tail -n 40 /var/log/cloud-init-output.log"))
	}
	if !windowsScript || !linuxScript {
		t.Errorf("Run Command scripts %+v: want the Windows and the Linux bootstrap log's end", runtime.Commands())
	}
	// Events are sent by the recorder's broadcaster in the background.
	var warned *corev1.Event
	env.Until(t, 30*time.Second, func(r client.Reader) string {
		evs := &corev1.EventList{}
		if err := r.List(f.ctx, evs, client.InNamespace(f.ns)); err != nil {
			return err.Error()
		}
		for i, e := range evs.Items {
			if e.Reason == controllers.BootstrapFailedReason && e.InvolvedObject.Name == "boot-md-windows-qwert" && strings.Contains(e.Message, "i/o timeout") {
				warned = &evs.Items[i]
				return ""
			}
		}
		return "no BootstrapFailed event for the Windows machine"
	})
	noSecret("the BootstrapFailed Event", warned.Message)
	if warned.Count > 1 {
		t.Errorf("the BootstrapFailed event was recorded %d times, want once", warned.Count)
	}

	// The node of the one that joined in time: never looked into.
	joined := &infrav1.AzureMachine{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "boot-md-joins"}, joined); err != nil {
		t.Fatal(err)
	}
	if c := conditions.Get(joined, controllers.BootstrapSucceededCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("the machine whose node registered: BootstrapSucceeded %+v, want True", c)
	}

	// A late node clears the failure.
	setNodeRef(t, f, "boot-md-windows-qwert", "boot-md-w-qwert")
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "boot-md-windows-qwert"}, am); err != nil {
			return err.Error()
		}
		if !conditions.IsTrue(am, controllers.BootstrapSucceededCondition) || !conditions.IsTrue(am, controllers.ReadyCondition) {
			return fmt.Sprintf("after the node registered: %+v", am.Status.Conditions)
		}
		return ""
	})
}

func setNodeRef(t *testing.T, f *fixture, machine, node string) {
	t.Helper()
	m := &clusterv1.Machine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: machine}, m); err != nil {
		t.Fatal(err)
	}
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	if err := env.Client.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}
