package flavors

import (
	"regexp"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/version"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

// Workload admission in the workload cluster: winkube's own binary
// ('winkube admission') as a Deployment behind a Service, delivered by a
// ClusterResourceSet to Clusters labelled winkube.dev/admission=enabled,
// which every flavor sets unless Options.NoAdmission.
const (
	// AdmissionLabel on a Cluster selects the admission ClusterResourceSet;
	// on a namespace, the value disabled turns admission off there.
	AdmissionLabel   = workload.OptOutLabel
	admissionEnabled = "enabled"
	// AdmissionNamespace holds the Deployment, its Service and the CA Secret.
	AdmissionNamespace = "winkube-system"
	admissionName      = "winkube-admission"
	// AdmissionCASecret is the Secret holding the one CA every replica signs
	// its serving certificate with.
	AdmissionCASecret = "winkube-admission-ca"
	// AdmissionImageRepository is the image the manager runs: the same
	// binary serves admission.
	AdmissionImageRepository = "ghcr.io/winkube/winkube-manager"
	admissionBinary          = "/winkube"
	admissionPort            = 9443
	admissionReplicas        = 2
)

// AdmissionImage is the image reference of this winkube's admission server.
func AdmissionImage() string { return AdmissionImageFor(version.Get().Version) }

// AdmissionLocalRepository names the admission image of a development
// build: only release tags are pushed to AdmissionImageRepository (the
// Makefile's image target, run by a release), so a development build's
// image exists only in the local world's registry, which serves it under
// this name. The .invalid domain (RFC 2606) never resolves: outside the
// local world the pull fails at once rather than finding a stranger's
// image.
const AdmissionLocalRepository = "winkube-local.invalid/winkube-manager"

// releaseVersion is a release's tag: vMAJOR.MINOR.PATCH, optionally a
// -rc.N or -beta.N prerelease, never a Go pseudo-version or -dev.
var releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-(alpha|beta|rc)\.[0-9]+)?$`)

// AdmissionImageFor is the admission image of a winkube of that version:
// the published image for a release, the local world's for any other
// build.
func AdmissionImageFor(v string) string {
	if releaseVersion.MatchString(v) && v != "v0.0.0" {
		return AdmissionImageRepository + ":" + v
	}
	return AdmissionLocalRepository + ":" + imageTag(v)
}

func (b *builder) admission() []client.Object {
	if b.o.NoAdmission {
		return nil
	}
	return b.crs(b.o.ClusterName+"-admission", map[string]string{AdmissionLabel: admissionEnabled},
		b.configMap("winkube-admission", AdmissionObjects(b.o.WindowsTaint)...))
}

// AdmissionObjects are what the ClusterResourceSet applies in the workload
// cluster. The webhook configurations carry no caBundle: the servers share
// one CA through a Secret and write its certificate there. Until they do,
// and whenever they are down, the webhooks' failure policy Ignore lets
// every request through, and kube-system and winkube-system are never
// sent to them, so the cluster cannot lock itself out.
func AdmissionObjects(windowsTaint bool) []runtime.Object {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: AdmissionNamespace, Labels: map[string]string{"app.kubernetes.io/name": admissionName}}
	}
	labels := map[string]string{"app.kubernetes.io/name": admissionName}
	m, v := workload.Configurations(admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Name: admissionName, Namespace: AdmissionNamespace, Port: ptr.To[int32](443)}})
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionNamespace, Labels: map[string]string{AdmissionLabel: "disabled"}}}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(admissionName)}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: admissionName, Namespace: AdmissionNamespace}}
	clusterRole := &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: admissionName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces", "services"}, Verbs: []string{"get", "list", "watch"}},
			// get: the build reporter reads its own event back, by name,
			// to count a repeat (internal/webhooks/workload builds.go).
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "create", "patch", "update"}},
			// Its own two webhook configurations, which this
			// ClusterResourceSet creates, and no other: update on every
			// configuration would let its token intercept (or switch
			// off) any admission webhook of the cluster. create cannot
			// be limited by name, so the server never creates them here.
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{m.Name}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{v.Name}, Verbs: []string{"get", "update", "patch"}},
		}}
	clusterBinding := &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: admissionName}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: admissionName}}
	// The CA Secret: any replica creates it when absent (create cannot be
	// limited by name), then reads and rotates only that one.
	role := &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta(admissionName),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{AdmissionCASecret}, Verbs: []string{"get", "update"}},
		}}
	roleBinding := &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: meta(admissionName),
		Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: admissionName}}

	args := []string{"admission", "--port=9443", "--cert-dir=/certs", "--service-name=" + admissionName, "--service-namespace=" + AdmissionNamespace, "--ca-secret=" + AdmissionCASecret}
	if windowsTaint {
		args = append(args, "--windows-taint")
	}
	pod := corev1.PodSpec{
		ServiceAccountName: admissionName,
		// Linux nodes, the control plane's included: admission must not
		// wait for workers, and its image is Linux-only.
		NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
		Tolerations:  []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		// Replicas on different nodes, so one node's loss leaves one serving.
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}}},
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{
			Name: "admission", Image: AdmissionImage(), Command: []string{admissionBinary}, Args: args,
			Ports:          []corev1.ContainerPort{{Name: "webhook", ContainerPort: admissionPort, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("webhook")}}, PeriodSeconds: 5},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/certs"}},
		}},
		Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
	deploy := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta(admissionName),
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](admissionReplicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod}}}
	pdb := &policyv1.PodDisruptionBudget{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}, ObjectMeta: meta(admissionName),
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(admissionName),
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook"), Protocol: corev1.ProtocolTCP}}}}
	m.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}
	v.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"}
	return []runtime.Object{ns, sa, clusterRole, clusterBinding, role, roleBinding, deploy, pdb, svc, m, v}
}
