package flavors_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/flavors"
)

// Every flavor's Cluster selects the admission ClusterResourceSet, whose
// objects a real API server accepts; the opt-out leaves both out.
func TestAdmissionIsInEveryClusterByDefault(t *testing.T) {
	for _, flavor := range flavors.Names() {
		o := opts("v1.36.3", "2019")
		objs, err := flavors.Generate(flavor, o)
		if err != nil {
			t.Fatal(err)
		}
		cluster, set, cm := admissionParts(t, objs)
		if cluster.Labels[flavors.AdmissionLabel] != "enabled" || set == nil || cm == nil {
			t.Fatalf("%s: Cluster labels %v, ClusterResourceSet %v, ConfigMap %v", flavor, cluster.Labels, set != nil, cm != nil)
		}
		sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
		if err != nil || !sel.Matches(labels.Set(cluster.Labels)) || set.Spec.Resources[0].Name != cm.Name {
			t.Fatalf("%s: the ClusterResourceSet does not select the Cluster or its ConfigMap: %v", flavor, err)
		}
		o.NoAdmission = true
		objs, _ = flavors.Generate(flavor, o)
		if cluster, set, cm := admissionParts(t, objs); cluster.Labels[flavors.AdmissionLabel] != "" || set != nil || cm != nil {
			t.Fatalf("%s: opted out, yet label %q, set %v, config map %v", flavor, cluster.Labels[flavors.AdmissionLabel], set != nil, cm != nil)
		}
	}
}

func admissionParts(t *testing.T, objs []client.Object) (cluster *clusterv1.Cluster, set *addonsv1.ClusterResourceSet, cm *corev1.ConfigMap) {
	for _, obj := range objs {
		switch o := obj.(type) {
		case *clusterv1.Cluster:
			cluster = o
		case *addonsv1.ClusterResourceSet:
			if strings.HasSuffix(o.Name, "-admission") {
				set = o
			}
		case *corev1.ConfigMap:
			if _, ok := o.Data["winkube-admission.yaml"]; ok {
				cm = o
			}
		}
	}
	return cluster, set, cm
}

// The delivered objects: two replicas kept by a PodDisruptionBudget, a
// Service on the webhook port, and webhooks that fail open and never see
// kube-system, the admission namespace or opted-out namespaces; applied to
// a real API server, which accepts each.
func TestAdmissionObjectsCannotLockTheClusterOut(t *testing.T) {
	objs, err := flavors.Generate(flavors.Windows, opts("v1.36.3", "2022"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, cm := admissionParts(t, objs)
	decoded := decodeStrict(t, []byte(strings.TrimSuffix(cm.Data["winkube-admission.yaml"], "\n")))
	var deploy *appsv1.Deployment
	var pdb *policyv1.PodDisruptionBudget
	var svc *corev1.Service
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	var validating *admissionregistrationv1.ValidatingWebhookConfiguration
	ctx := context.Background()
	for _, obj := range decoded {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			deploy = o
		case *policyv1.PodDisruptionBudget:
			pdb = o
		case *corev1.Service:
			svc = o
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			mutating = o
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			validating = o
		}
		// A dry run, so the test does not depend on the add-on test of the
		// package having applied the same objects (or not): an existing
		// object is validated as an update instead.
		o := obj.(client.Object)
		var opts []client.CreateOption
		if _, isNamespace := obj.(*corev1.Namespace); !isNamespace {
			opts = append(opts, client.DryRunAll) // the others need it to exist
		}
		err := env.Client.Create(ctx, o, opts...)
		if apierrors.IsAlreadyExists(err) {
			cur := o.DeepCopyObject().(client.Object)
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				t.Fatal(err)
			}
			o.SetResourceVersion(cur.GetResourceVersion())
			err = env.Client.Update(ctx, o, client.DryRunAll)
		}
		if err != nil {
			t.Fatalf("%T refused by the API server: %v", obj, err)
		}
	}
	if deploy == nil || *deploy.Spec.Replicas != 2 || pdb == nil || pdb.Spec.MinAvailable.IntValue() != 1 || svc == nil || mutating == nil || validating == nil {
		t.Fatalf("missing or wrong: deployment %v, pdb %v, service %v, webhooks %v %v", deploy != nil, pdb != nil, svc != nil, mutating != nil, validating != nil)
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	if c.Image != flavors.AdmissionImage() || c.Args[0] != "admission" || !contains(c.Args, "--ca-secret="+flavors.AdmissionCASecret) || c.Ports[0].ContainerPort != 9443 {
		t.Fatalf("container %+v", c)
	}
	if svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.StrVal != c.Ports[0].Name {
		t.Fatalf("service ports %+v", svc.Spec.Ports)
	}
	check := func(name string, policy *admissionregistrationv1.FailurePolicyType, ns *metav1.LabelSelector, cc admissionregistrationv1.WebhookClientConfig) {
		if policy == nil || *policy != admissionregistrationv1.Ignore {
			t.Errorf("%s: failure policy %v, want Ignore", name, policy)
		}
		sel, err := metav1.LabelSelectorAsSelector(ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, exempt := range []labels.Set{
			{corev1.LabelMetadataName: "kube-system"},
			{corev1.LabelMetadataName: flavors.AdmissionNamespace, flavors.AdmissionLabel: "disabled"},
			{corev1.LabelMetadataName: flavors.AdmissionNamespace},
			{corev1.LabelMetadataName: "team-a", flavors.AdmissionLabel: "disabled"},
		} {
			if sel.Matches(exempt) {
				t.Errorf("%s: namespace %v is sent to the webhook", name, exempt)
			}
		}
		if !sel.Matches(labels.Set{corev1.LabelMetadataName: "default"}) {
			t.Errorf("%s: namespace default is not", name)
		}
		if cc.Service == nil || cc.Service.Name != svc.Name || cc.Service.Namespace != svc.Namespace || len(cc.CABundle) != 0 {
			t.Errorf("%s: client config %+v: want the Service, and no caBundle (the servers write it)", name, cc)
		}
	}
	for _, w := range mutating.Webhooks {
		check(w.Name, w.FailurePolicy, w.NamespaceSelector, w.ClientConfig)
	}
	for _, w := range validating.Webhooks {
		check(w.Name, w.FailurePolicy, w.NamespaceSelector, w.ClientConfig)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
