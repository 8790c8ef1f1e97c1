package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/poll"
)

// ccmImage is cloud-provider-azure's controller manager, as its chart
// v1.36.5 names it.
const ccmImage = "mcr.microsoft.com/oss/kubernetes/azure-cloud-controller-manager:v1.36.5"

// ccmOutcome is how a LoadBalancer Service ended: its EXTERNAL-IP, or the
// service controller's Warning.
type ccmOutcome struct{ ip, warning string }

// runCCM runs the simulated cloud-controller-manager on node with the
// cloud config azureJSON, the node's VM's IMDS at imds, and returns how a
// new LoadBalancer Service in namespace ns ends. Only one runs at a time:
// each acts on every Service.
func runCCM(t *testing.T, w *entraWorld, ns, node, imds string, azureJSON []byte) ccmOutcome {
	t.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "cloud-controller-manager-", Namespace: metav1.NamespaceSystem},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cloud-controller-manager", Image: ccmImage,
			Args: []string{"--cloud-config=" + cloudprovider.DefaultCloudConfig, "--controllers=*,-cloud-node"}}}}}
	pod, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)) }()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ccm := cloudprovider.Start(cloudprovider.Config{
		Client: cs, Images: func(image string) bool { return image == ccmImage },
		// No credential of the connection's own: the cloud config's.
		Connect: machines.ARMNetwork(func() (azcore.TokenCredential, *azarm.ClientOptions, error) {
			opts, err := w.cfg.ClientOptions()
			return nil, opts, err
		}),
		IMDS: func(n string) string {
			if n == node {
				return imds
			}
			return ""
		},
		ReadNodeFile: func(n, path string) ([]byte, error) {
			if n != node || path != cloudprovider.DefaultCloudConfig {
				return nil, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
			}
			return azureJSON, nil
		},
		Log: logr.Discard(),
	})
	defer ccm.Stop()
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out ccmOutcome
	poll.Until(t, 90*time.Second, func() string {
		cur, err := cs.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if in := cur.Status.LoadBalancer.Ingress; len(in) > 0 {
			out.ip = in[0].IP
			return ""
		}
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + svc.Name})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SyncLoadBalancerFailed" {
				out.warning = e.Message
				return ""
			}
		}
		return "Service " + svc.Name + " is still <pending> with no warning"
	})
	// The Service goes with its load balancer while the controller that
	// made it runs; one that failed keeps nothing in Azure, and its
	// finalizer is taken off by hand, as an operator would.
	if err := cs.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out.ip == "" {
		ccm.Stop()
		if cur, err := cs.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
			cur.Finalizers = nil
			_, _ = cs.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := cs.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
			return "Service " + svc.Name + " is still there"
		}
		return ""
	})
	return out
}

// machineAzureJSON is the cloud config the provider wrote for a machine's
// nodes.
func machineAzureJSON(t *testing.T, f *fixture, machine string) []byte {
	t.Helper()
	var data []byte
	env.Until(t, time.Minute, func(r client.Reader) string {
		s := &corev1.Secret{}
		if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: machine + azurejson.SecretSuffix}, s); err != nil {
			return err.Error()
		}
		data = s.Data[azurejson.WorkerNodeKey]
		return ""
	})
	return data
}

// editJSON changes a cloud config as a user editing the file would.
func editJSON(t *testing.T, data []byte, change func(*azurejson.Config)) []byte {
	t.Helper()
	var c azurejson.Config
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	change(&c)
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// expectWarning checks that a Service stayed <pending> with a warning
// holding each of want, which winkube doctor explains as why says.
func expectWarning(t *testing.T, name string, got ccmOutcome, why string, want ...string) {
	t.Helper()
	if got.ip != "" {
		t.Errorf("%s: the Service got EXTERNAL-IP %s; Azure would refuse its cloud provider", name, got.ip)
		return
	}
	for _, w := range want {
		if !strings.Contains(got.warning, w) {
			t.Errorf("%s: the warning %q does not say %q", name, got.warning, w)
		}
	}
	if explained, fix := doctor.ExplainLoadBalancerFailure(got.warning); !strings.Contains(explained, why) || fix == "" {
		t.Errorf("%s: winkube doctor explains %q as %q (fix %q), not as %q", name, got.warning, explained, fix, why)
	}
}
