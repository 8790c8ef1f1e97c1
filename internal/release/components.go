// Package release builds what a management cluster installs winkube from: a
// clusterctl provider repository (metadata, infrastructure components, cluster
// templates) and the manager's container image. The components are typed
// objects built from the manifests `make generate` writes (CRDs, RBAC,
// webhook configuration), so they cannot drift from the code.
package release

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/config"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/scheme"
)

// Names of the components' objects. clusterctl may install them into another
// namespace (--target-namespace); it rewrites the references that name it.
const (
	Namespace          = "winkube-system"
	ServiceAccount     = "winkube-manager"
	ClusterRole        = "winkube-manager" // as controller-gen names it (hack/generate.sh)
	ClusterAPIRole     = "winkube-cluster-api"
	LeaderElectionRole = "winkube-leader-election"
	Deployment         = "winkube-controller-manager"
	WebhookService     = "winkube-webhook-service"
	Issuer             = "winkube-selfsigned-issuer"
	Certificate        = "winkube-serving-cert"
	CertSecret         = "winkube-webhook-service-cert"
	MutatingWebhooks   = "winkube-mutating-webhook-configuration"
	ValidatingWebhooks = "winkube-validating-webhook-configuration"
	CredentialsSecret  = "winkube-azure-credentials"

	// Ports and paths of the manager container.
	WebhookPort   = 9443
	MetricsPort   = 8080
	HealthPort    = 8081
	CertDir       = "/tmp/k8s-webhook-server/serving-certs"
	BinaryPath    = "/winkube"
	NonRootUserID = 65532

	// GracefulShutdown is what the manager gives reconciles in progress on
	// SIGTERM; the Pod's grace period leaves it room beyond that.
	GracefulShutdown = 30
)

// ContractVersion is the Cluster API contract winkube implements.
const ContractVersion = "v1beta2"

// ManagerLabels select the manager's Pods.
var ManagerLabels = map[string]string{"control-plane": Deployment}

// moveLabels are the clusterctl move labels of CRDs whose objects do not
// reach a Cluster through owner references. Every current kind does
// (AzureCluster and templates through the Cluster, machines through
// Machines, pool machines through their pool); an identity shared between
// clusters would be moved with its own hierarchy, as CAPZ's identities are.
var moveLabels = map[string]string{
	"AzureClusterIdentity": clusterctlv1.ClusterctlMoveHierarchyLabel,
}

// Options name what the components run.
type Options struct {
	// Image is the manager image, such as ghcr.io/winkube/winkube-manager:v0.1.0.
	Image string
}

// Components builds infrastructure-components.yaml's objects.
func Components(o Options) ([]client.Object, error) {
	if o.Image == "" {
		return nil, fmt.Errorf("release: no manager image")
	}
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	role, err := clusterRole()
	if err != nil {
		return nil, err
	}
	capiRole := clusterAPIRole(crds)
	mutating, validating, err := webhookConfigurations()
	if err != nil {
		return nil, err
	}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: ManagerLabels}}}
	for _, crd := range crds {
		objs = append(objs, crd)
	}
	objs = append(objs,
		&corev1.ServiceAccount{ObjectMeta: meta(ServiceAccount)},
		role, capiRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace}},
		},
		leaderElectionRole(),
		&rbacv1.RoleBinding{
			ObjectMeta: meta(LeaderElectionRole),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: LeaderElectionRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: Namespace}},
		},
		&corev1.Service{
			ObjectMeta: meta(WebhookService),
			Spec: corev1.ServiceSpec{Selector: ManagerLabels, Ports: []corev1.ServicePort{{
				Port: 443, TargetPort: intstr.FromString("webhook-server"), Protocol: corev1.ProtocolTCP,
			}}},
		},
		deployment(o.Image),
		issuer(),
		certificate(),
		mutating, validating,
	)
	return objs, nil
}

// ComponentsYAML renders the components as infrastructure-components.yaml.
func ComponentsYAML(o Options) ([]byte, error) {
	objs, err := Components(o)
	if err != nil {
		return nil, err
	}
	return flavors.YAML(scheme.New(), objs)
}

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: Namespace}
}

// readYAML decodes one generated manifest of config/ into a typed object.
func readYAML(name string, into any) error {
	data, err := fs.ReadFile(config.FS(), name)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("release: %s: %w", name, err)
	}
	return nil
}

// CRDs are winkube's CRDs as the components carry them: with the contract
// label by which Cluster API finds the served version of each kind, and
// the labels clusterctl's move discovers kinds by.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(config.FS(), "crd/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, n := range names {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := readYAML(n, crd); err != nil {
			return nil, err
		}
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterv1.GroupVersion.Group+"/"+ContractVersion] = infrav1.GroupVersion.Version
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		if l, ok := moveLabels[crd.Spec.Names.Kind]; ok {
			crd.Labels[l] = ""
		}
		out = append(out, crd)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("release: no CRDs under config/crd: run make generate")
	}
	return out, nil
}

// Labels by which Cluster API's managers gather the rights providers give
// them: the core manager's ClusterRole aggregates every ClusterRole carrying
// the first, the kubeadm control plane's the second
// (core/config/rbac/aggregated_role.yaml and
// controlplane/kubeadm/config/rbac/aggregated_role.yaml, cluster-api
// v1.14.2).
const (
	AggregateToClusterAPI          = "cluster.x-k8s.io/aggregate-to-manager"
	AggregateToKubeadmControlPlane = "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager"
)

// clusterAPIRole gives Cluster API's controllers winkube's kinds. Their own
// roles grant only infrastructure.cluster.x-k8s.io (the kubebuilder markers
// of core/reconcilers/{cluster,machine,machineset,machinepool} and of
// kubeadmcontrolplane_controller.go, cluster-api v1.14.2), and the
// provider contracts say a provider in another API group MUST grant them
// full read and write through the aggregation label
// (docs/book/src/developer/providers/contracts/infra-machine.md, same
// tag). Without it, on a real management cluster the Cluster controller
// cannot read the AzureCluster, MachineSets and KubeadmControlPlane cannot
// clone AzureMachineTemplates and the MachinePool controller cannot list
// AzureMachinePoolMachines: nothing provisions. (The local world runs
// Cluster API's controllers with the API server's admin, which hid it.)
// The resources are the CRDs' own, so a new kind is covered; no
// subresource: Cluster API writes the objects, never their status.
func clusterAPIRole(crds []*apiextensionsv1.CustomResourceDefinition) *rbacv1.ClusterRole {
	var plurals []string
	for _, crd := range crds {
		plurals = append(plurals, crd.Spec.Names.Plural)
	}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterAPIRole, Labels: map[string]string{AggregateToClusterAPI: "true", AggregateToKubeadmControlPlane: "true"}},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{infrav1.GroupVersion.Group}, Resources: plurals,
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
}

// clusterRole is the ClusterRole controller-gen writes from the
// controllers' kubebuilder markers.
func clusterRole() (*rbacv1.ClusterRole, error) {
	role := &rbacv1.ClusterRole{}
	if err := readYAML("rbac/role.yaml", role); err != nil {
		return nil, err
	}
	if role.Name != ClusterRole {
		return nil, fmt.Errorf("release: config/rbac/role.yaml names ClusterRole %q, not %q", role.Name, ClusterRole)
	}
	return role, nil
}

// leaderElectionRole lets the manager hold its Lease in its own namespace
// and record the leader-election events controller-runtime sends.
func leaderElectionRole() *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: meta(LeaderElectionRole),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
}

// ManagerArgs are the manager container's arguments (its image's entrypoint
// is `winkube manager`).
func ManagerArgs() []string {
	return []string{
		"--leader-elect",
		// Plain HTTP without authentication: only the Pod's own
		// containers reach it (a kube-rbac-proxy sidecar, or a
		// Prometheus agent beside it); see the README.
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", MetricsPort),
		fmt.Sprintf("--health-probe-bind-address=:%d", HealthPort),
		fmt.Sprintf("--webhook-port=%d", WebhookPort),
		"--webhook-cert-dir=" + CertDir,
		fmt.Sprintf("--graceful-shutdown-timeout=%ds", GracefulShutdown),
		"--log-format=json",
		"--v=0",
	}
}

func deployment(image string) *appsv1.Deployment {
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("healthz")}}}
	}
	live, ready := probe("/healthz"), probe("/readyz")
	live.InitialDelaySeconds, live.PeriodSeconds = 15, 20
	ready.PeriodSeconds = 10
	container := corev1.Container{
		Name:  "manager",
		Image: image,
		Args:  ManagerArgs(),
		Ports: []corev1.ContainerPort{
			{Name: "webhook-server", ContainerPort: WebhookPort, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "healthz", ContainerPort: HealthPort, Protocol: corev1.ProtocolTCP},
		},
		LivenessProbe:  live,
		ReadinessProbe: ready,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](NonRootUserID),
			RunAsGroup:               ptr.To[int64](NonRootUserID),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		// The Azure SDK's default credential chain reads AZURE_TENANT_ID,
		// AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (or a workload identity's
		// token file) from the environment: a Secret of that name, when
		// the user creates one, supplies them.
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: CredentialsSecret}, Optional: ptr.To(true),
		}}},
		VolumeMounts:             []corev1.VolumeMount{{Name: "cert", MountPath: CertDir, ReadOnly: true}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Deployment, Namespace: Namespace, Labels: ManagerLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: ManagerLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: ManagerLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: ServiceAccount,
					Containers:         []corev1.Container{container},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](GracefulShutdown + 10),
					// The manager runs on Linux (its image is linux/amd64),
					// and may run on control-plane nodes, as Cluster API's do.
					NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
					},
					Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{
						Secret: &corev1.SecretVolumeSource{SecretName: CertSecret},
					}}},
				},
			},
		},
	}
}

// cert-manager's objects are built from maps: winkube does not take a Go
// module on cert-manager only to spell two small objects.
func certManagerObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("cert-manager.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	u.SetNamespace(Namespace)
	return u
}

func issuer() *unstructured.Unstructured {
	return certManagerObject("Issuer", Issuer, map[string]any{"selfSigned": map[string]any{}})
}

// WebhookDNSNames are the names the API server reaches the webhook Service by.
func WebhookDNSNames() []string {
	return []string{WebhookService + "." + Namespace + ".svc", WebhookService + "." + Namespace + ".svc.cluster.local"}
}

func certificate() *unstructured.Unstructured {
	var names []any
	for _, n := range WebhookDNSNames() {
		names = append(names, n)
	}
	return certManagerObject("Certificate", Certificate, map[string]any{
		"dnsNames":   names,
		"issuerRef":  map[string]any{"kind": "Issuer", "name": Issuer},
		"secretName": CertSecret,
	})
}

// webhookConfigurations are controller-gen's, pointed at the webhook
// Service, with the CA that cert-manager's cainjector copies from the
// Certificate's Secret.
func webhookConfigurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := fs.ReadFile(config.FS(), "webhook/manifests.yaml")
	if err != nil {
		return nil, nil, err
	}
	docs, err := splitYAML(data)
	if err != nil {
		return nil, nil, err
	}
	var (
		m *admissionregistrationv1.MutatingWebhookConfiguration
		v *admissionregistrationv1.ValidatingWebhookConfiguration
	)
	inject := map[string]string{"cert-manager.io/inject-ca-from": Namespace + "/" + Certificate}
	service := func(s *admissionregistrationv1.ServiceReference) {
		s.Name, s.Namespace = WebhookService, Namespace
	}
	for _, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, nil, err
		}
		switch tm.Kind {
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, m); err != nil {
				return nil, nil, err
			}
			m.Name, m.Annotations = MutatingWebhooks, inject
			for i := range m.Webhooks {
				service(m.Webhooks[i].ClientConfig.Service)
			}
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				return nil, nil, err
			}
			v.Name, v.Annotations = ValidatingWebhooks, inject
			for i := range v.Webhooks {
				service(v.Webhooks[i].ClientConfig.Service)
			}
		default:
			return nil, nil, fmt.Errorf("release: config/webhook/manifests.yaml has an unexpected %s", tm.Kind)
		}
	}
	if m == nil || v == nil {
		return nil, nil, fmt.Errorf("release: config/webhook/manifests.yaml lacks a mutating or validating configuration: run make generate")
	}
	return m, v, nil
}

// splitYAML splits a YAML stream into its non-empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
}
