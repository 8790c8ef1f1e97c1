package workload

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Configurations are the webhook configurations of workload admission:
// pods and the workload kinds with pod templates, in every namespace not
// labelled winkube.dev/admission=disabled, except kube-system and the
// webhook server's own namespace. The webhooks' own failure policy is
// Ignore: winkube being down, or not yet holding a certificate the API
// server trusts, must not stop a cluster's workloads, nor the pods that
// would bring it back. The registry failure policy is the server's.

// PlacementWebhookName names the workload cluster's mutating webhook
// configuration for pod placement.
const PlacementWebhookName = "winkube-workload-placement"

func Configurations(clientConfig admissionregistrationv1.WebhookClientConfig) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	exempt := []string{metav1.NamespaceSystem}
	if clientConfig.Service != nil && clientConfig.Service.Namespace != metav1.NamespaceSystem {
		exempt = append(exempt, clientConfig.Service.Namespace)
	}
	optOut := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: OptOutLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}},
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: exempt},
	}}
	rules := []admissionregistrationv1.RuleWithOperations{
		rule("", "v1", "pods"),
		rule("apps", "v1", "deployments", "daemonsets", "statefulsets", "replicasets"),
		rule("batch", "v1", "jobs", "cronjobs"),
	}
	at := func(path string) admissionregistrationv1.WebhookClientConfig {
		c := *clientConfig.DeepCopy()
		if c.Service != nil {
			c.Service.Path = ptr.To(path)
		} else if c.URL != nil {
			c.URL = ptr.To(*c.URL + path)
		}
		return c
	}
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: PlacementWebhookName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "placement.workload.winkube.dev", ClientConfig: at(MutatePath), Rules: rules, NamespaceSelector: optOut,
			FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10),
			ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "winkube-workload-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "windows.workload.winkube.dev", ClientConfig: at(ValidatePath), Rules: rules, NamespaceSelector: optOut,
			FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10),
		}, {
			Name: "services.workload.winkube.dev", ClientConfig: at(ServicesPath), Rules: []admissionregistrationv1.RuleWithOperations{rule("", "v1", "services")},
			NamespaceSelector: optOut, FailurePolicy: &ignore, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10),
		}},
	}
	return m, v
}

func rule(group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources},
	}
}
