package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/credentials"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azurejson"
)

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azureclusteridentities,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reasons of a cluster whose identity cannot be used.
// (api/v1alpha1).
const (
	IdentityNotFoundReason             = infrav1.IdentityNotFoundReason
	NamespaceNotAllowedReason          = infrav1.NamespaceNotAllowedReason
	IdentitySecretNotFoundReason       = infrav1.IdentitySecretNotFoundReason
	InvalidIdentityReason              = infrav1.InvalidIdentityReason
	IdentityAuthenticationFailedReason = infrav1.IdentityAuthenticationFailedReason
	CustomCloudNotConfiguredReason     = infrav1.CustomCloudNotConfiguredReason
	ManagerCredentialNotAllowedReason  = infrav1.ManagerCredentialNotAllowedReason
	AmbientIdentityNotAllowedReason    = infrav1.AmbientIdentityNotAllowedReason
	ClusterIdentityUnknownReason       = infrav1.ClusterIdentityUnknownReason
)

// AllNamespaces in ManagerCredentialNamespaces enables the manager's own
// credential for every namespace.
const AllNamespaces = "*"

// identityError says why a cluster's identity cannot be used; no token is
// asked for until it is fixed.
type identityError struct{ reason, msg string }

func (e *identityError) Error() string { return e.msg }

// IdentityErrorReason is the condition reason of an error saying why an
// identity cannot be used, "" for any other error.
func IdentityErrorReason(err error) string {
	if ie := (*identityError)(nil); errors.As(err, &ie) {
		return ie.reason
	}
	return ""
}

// Identities resolves a cluster's AzureClusterIdentity to the Azure
// services acting as it. Each identity has one credential, kept until the
// identity, its Secret (by resourceVersion) or its cloud changes; the
// process's own credential serves only clusters without an identityRef.
type Identities struct {
	// Client reads identities and namespaces, and Secrets' metadata (a
	// metadata-only informer), from the cache.
	Client client.Client
	// Reader reads a Secret's data from the API server, so that the
	// manager does not cache the data of every Secret of the cluster.
	Reader client.Reader
	// Watch, when set, keeps the identity Secrets in use, each through a
	// watch of its own, so that a reconcile reads no Secret from the API
	// server; without it each read asks the API server for the Secret's
	// version.
	Watch *SecretWatch
	Cloud *cloud.Cloud
	// FederatedTokenFile is the manager's projected service-account token
	// for WorkloadIdentity identities (AZURE_FEDERATED_TOKEN_FILE).
	FederatedTokenFile string
	// CustomClouds are the clouds besides Azure's named ones that a
	// cluster may pick (spec.azureEnvironment Custom with exactly their
	// endpoints); the manager's own endpoint counts as one. A credential
	// or token goes to no other host.
	CustomClouds []cloud.CustomCloud
	// ManagerCredentialNamespaces are the namespaces whose clusters may
	// act without an identityRef, as the manager's own credential
	// (AllNamespaces for every one). None by default: since CAPZ v1.11
	// every cluster needs an AzureClusterIdentity
	// (kubernetes-sigs/cluster-api-provider-azure#3793), since the
	// manager's credential would otherwise serve any namespace.
	ManagerCredentialNamespaces []string
	// AmbientIdentityNamespaces are the namespaces whose WorkloadIdentity
	// and UserAssignedMSI identities the manager honours (AllNamespaces
	// for every one; none when empty). Those identities carry no secret:
	// the manager proves them with its own service-account token or its
	// host's managed identity, which any principal federated with the
	// manager, or assigned to its host, accepts. An identity's allowed
	// namespaces protect it from other namespaces, not a copy of it
	// written into a tenant's own namespace naming the same client ID: so
	// only the operator, who writes identities in these namespaces, may
	// name one.
	AmbientIdentityNamespaces []string

	mu    sync.Mutex
	creds map[types.NamespacedName]cachedCredential
	// clouds holds each configured custom cloud's endpoint with its
	// transport, built once.
	clouds map[string]*endpoint.Config
	// secrets holds the last Secret read for each identity Secret in use:
	// the data of those few, never of every Secret.
	secrets map[types.NamespacedName]*corev1.Secret
}

// newIdentities resolves identities for reconcilers built without one.
func newIdentities(mgr ctrl.Manager, c *cloud.Cloud, o Options) (*Identities, error) {
	w, err := newManagerSecretWatch(mgr)
	if err != nil {
		return nil, err
	}
	return &Identities{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Watch: w, Cloud: c, FederatedTokenFile: o.FederatedTokenFile,
		CustomClouds: o.CustomClouds, ManagerCredentialNamespaces: o.ManagerCredentialNamespaces, AmbientIdentityNamespaces: o.AmbientIdentityNamespaces}, nil
}

type cachedCredential struct {
	version string
	cred    azcore.TokenCredential
}

// Services returns the services of the cluster's subscription acting as
// its identity.
func (i *Identities) Services(ctx context.Context, ac *infrav1.AzureCluster) (*cloud.Services, error) {
	ref := ac.Spec.IdentityRef
	if ref == nil {
		if ac.Spec.AzureEnvironment != nil {
			return nil, &identityError{InvalidIdentityReason, "spec.azureEnvironment needs spec.identityRef: the manager's own credential belongs to the manager's cloud"}
		}
		if !i.managerCredentialAllowed(ac.Namespace) {
			return nil, &identityError{ManagerCredentialNotAllowedReason, fmt.Sprintf("AzureCluster %s/%s has no spec.identityRef, and the manager's own credential is not enabled for namespace %q: point spec.identityRef at an AzureClusterIdentity that allows the namespace, or have the operator add the namespace to the manager's --manager-credential-namespaces", ac.Namespace, ac.Name, ac.Namespace)}
		}
		s, err := i.Cloud.For(ac.Spec.SubscriptionID)
		if errors.Is(err, cloud.ErrNoCredential) {
			return nil, &identityError{InvalidIdentityReason, err.Error()}
		}
		return s, err
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if key.Namespace == "" {
		key.Namespace = ac.Namespace
	}
	id := &infrav1.AzureClusterIdentity{}
	if err := i.Client.Get(ctx, key, id); apierrors.IsNotFound(err) {
		return nil, &identityError{IdentityNotFoundReason, fmt.Sprintf("AzureClusterIdentity %s does not exist: create it or fix spec.identityRef", key)}
	} else if err != nil {
		return nil, err
	}
	allowed, err := i.namespaceAllowed(ctx, id.Spec.AllowedNamespaces, ac.Namespace)
	if err != nil {
		return nil, err
	}
	if !allowed {
		return nil, &identityError{NamespaceNotAllowedReason, fmt.Sprintf("AzureClusterIdentity %s does not allow clusters of namespace %q: add it to the identity's spec.allowedNamespaces.list or label it to match spec.allowedNamespaces.selector", key, ac.Namespace)}
	}
	if err := i.ambientAllowed(id); err != nil {
		return nil, err
	}
	env, envKey, err := i.environment(ac.Spec.AzureEnvironment)
	if err != nil {
		return nil, err
	}
	shared, err := i.Cloud.Shared()
	if err != nil {
		return nil, err
	}
	spec := credentials.Spec{TenantID: id.Spec.TenantID, ClientID: id.Spec.ClientID, AuthorityHost: shared.Authority(), Transport: shared.Transport}
	if env != nil {
		spec.AuthorityHost, spec.Transport = env.Authority(), env.Transport
	}
	version := id.ResourceVersion + "|" + envKey
	switch id.Spec.Type {
	case infrav1.ServicePrincipal, infrav1.ServicePrincipalCertificate:
		secret, err := i.secret(ctx, id)
		if err != nil {
			return nil, err
		}
		version += "|" + secret.ResourceVersion
		if id.Spec.Type == infrav1.ServicePrincipal {
			spec.Kind, spec.Secret = credentials.ClientSecret, string(secret.Data[infrav1.ClientSecretKey])
			if spec.Secret == "" {
				return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("Secret %s/%s of AzureClusterIdentity %s has no key %q", secret.Namespace, secret.Name, key, infrav1.ClientSecretKey)}
			}
		} else {
			spec.Kind, spec.CertificatePEM, spec.CertificatePassword = credentials.ClientCertificate, secret.Data[infrav1.ClientCertificateKey], secret.Data[infrav1.CertificatePasswordKey]
		}
	case infrav1.WorkloadIdentity:
		spec.Kind, spec.TokenFile = credentials.WorkloadIdentity, i.FederatedTokenFile
		if spec.TokenFile == "" {
			return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("AzureClusterIdentity %s is a WorkloadIdentity but the manager has no service-account token file: run it with AZURE_FEDERATED_TOKEN_FILE (the workload identity webhook sets it)", key)}
		}
	case infrav1.UserAssignedMSI:
		spec.Kind = credentials.ManagedIdentity
	default:
		return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("AzureClusterIdentity %s has unknown type %q", key, id.Spec.Type)}
	}
	cred, err := i.credential(key, version, spec)
	if err != nil {
		return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("AzureClusterIdentity %s: %v", key, err)}
	}
	return i.Cloud.ForIdentity(&cloud.Identity{Key: "identity/" + key.String(), Version: version, Credential: cred, Cloud: env}, ac.Spec.SubscriptionID)
}

// ambientAllowed refuses a WorkloadIdentity or UserAssignedMSI identity
// outside AmbientIdentityNamespaces before any token is asked for: its
// token would be the manager's own.
func (i *Identities) ambientAllowed(id *infrav1.AzureClusterIdentity) error {
	if id.Spec.Type != infrav1.WorkloadIdentity && id.Spec.Type != infrav1.UserAssignedMSI {
		return nil
	}
	if namespaceListed(i.AmbientIdentityNamespaces, id.Namespace) {
		return nil
	}
	where := "the manager honours them in no namespace"
	if len(i.AmbientIdentityNamespaces) > 0 {
		where = "the manager honours them only in namespaces " + strings.Join(i.AmbientIdentityNamespaces, ", ")
	}
	return &identityError{AmbientIdentityNotAllowedReason, fmt.Sprintf("AzureClusterIdentity %s/%s is a %s, whose token is the manager's own (its service-account token or its host's managed identity), and %s (--ambient-identity-namespaces): have the operator create it there, with this namespace in its spec.allowedNamespaces", id.Namespace, id.Name, id.Spec.Type, where)}
}

// cloudProviderCredentials is what a cluster's cloud provider (azure.json)
// authenticates with, as CAPZ writes it: the identity's service principal
// and client secret, or its user-assigned managed identity. ok is false
// without an identityRef, and for identities the node cannot use this way
// (certificate, workload identity), which leave the VMs' managed identity.
// A namespace the identity does not allow gets nothing: its secret must
// not land in that namespace's azure.json Secret.
func (i *Identities) cloudProviderCredentials(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, bool, error) {
	ref := ac.Spec.IdentityRef
	if ref == nil {
		return azurejson.Credentials{}, false, nil
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if key.Namespace == "" {
		key.Namespace = ac.Namespace
	}
	id := &infrav1.AzureClusterIdentity{}
	if err := i.Client.Get(ctx, key, id); err != nil {
		return azurejson.Credentials{}, false, fmt.Errorf("AzureClusterIdentity %s: %w", key, err)
	}
	allowed, err := i.namespaceAllowed(ctx, id.Spec.AllowedNamespaces, ac.Namespace)
	if err != nil {
		return azurejson.Credentials{}, false, err
	}
	if !allowed {
		return azurejson.Credentials{}, false, &identityError{NamespaceNotAllowedReason, fmt.Sprintf("AzureClusterIdentity %s does not allow clusters of namespace %q", key, ac.Namespace)}
	}
	// The nodes' own metadata service proves a managed identity, not the
	// manager's; refused all the same, so that this agrees with the
	// cluster's Ready.
	if err := i.ambientAllowed(id); err != nil {
		return azurejson.Credentials{}, false, err
	}
	switch id.Spec.Type {
	case infrav1.ServicePrincipal:
		secret, err := i.secret(ctx, id)
		if err != nil {
			return azurejson.Credentials{}, false, err
		}
		return azurejson.Credentials{TenantID: id.Spec.TenantID, ClientID: id.Spec.ClientID, ClientSecret: string(secret.Data[infrav1.ClientSecretKey])}, true, nil
	case infrav1.UserAssignedMSI:
		return azurejson.Credentials{TenantID: id.Spec.TenantID, UserAssignedIdentityID: id.Spec.ClientID}, id.Spec.TenantID != "", nil
	}
	return azurejson.Credentials{}, false, nil
}

// azureJSONCredentials is the azure.json reconciler's Credentials: the
// cluster's identity where it has one, else the VMs' managed identity in
// the manager's tenant.
func (i *Identities) azureJSONCredentials(tenant string) func(context.Context, *infrav1.AzureCluster) (azurejson.Credentials, error) {
	return func(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, error) {
		if c, ok, err := i.cloudProviderCredentials(ctx, ac); ok || err != nil {
			return c, err
		}
		t := tenant
		if t == "" {
			t = os.Getenv("AZURE_TENANT_ID")
		}
		if t == "" {
			return azurejson.Credentials{}, fmt.Errorf("no Azure tenant for the cloud provider config of cluster %s: set AZURE_TENANT_ID for the manager", ac.Name)
		}
		return azurejson.Credentials{TenantID: t}, nil
	}
}

// ServicesFor returns the services of a subscription an object recorded
// (deletion works from what was recorded), acting as the identity of the
// object's AzureCluster, checked as for the cluster itself (the identity
// must still allow the namespace). Without its AzureCluster the identity
// the resources were made as is unknown: the object waits rather than act
// as anyone else, the manager's own credential included.
func (i *Identities) ServicesFor(ctx context.Context, obj client.Object, subscription string) (*cloud.Services, error) {
	ac, err := i.clusterOf(ctx, obj)
	if err != nil {
		return nil, err
	}
	if ac == nil {
		return nil, &identityError{ClusterIdentityUnknownReason, fmt.Sprintf("the AzureCluster of cluster %q in namespace %s is gone, so the identity this object's Azure resources were made as is unknown, and winkube does not act on them with another credential: recreate the AzureCluster with its identityRef, or delete the resources in Azure and remove the finalizer", obj.GetLabels()[clusterv1.ClusterNameLabel], obj.GetNamespace())}
	}
	ac = ac.DeepCopy()
	ac.Spec.SubscriptionID = subscription
	return i.Services(ctx, ac)
}

// clusterOf is the AzureCluster of an object's cluster: the Cluster's
// infrastructure, or once the Cluster is gone the AzureCluster carrying
// the cluster's name label; nil when there is none.
func (i *Identities) clusterOf(ctx context.Context, obj client.Object) (*infrav1.AzureCluster, error) {
	name := obj.GetLabels()[clusterv1.ClusterNameLabel]
	if name == "" {
		return nil, nil
	}
	cluster := &clusterv1.Cluster{}
	err := i.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, cluster)
	if err == nil && cluster.Spec.InfrastructureRef.Kind == "AzureCluster" {
		ac := &infrav1.AzureCluster{}
		if err := i.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: cluster.Spec.InfrastructureRef.Name}, ac); err == nil {
			return ac, nil
		} else if !apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	list := &infrav1.AzureClusterList{}
	if err := i.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// managerCredentialAllowed says whether the operator enabled the manager's
// own credential for a namespace.
func (i *Identities) managerCredentialAllowed(namespace string) bool {
	return namespaceListed(i.ManagerCredentialNamespaces, namespace)
}

// namespaceListed reports whether an operator's list of namespaces names
// namespace, or all of them (AllNamespaces).
func namespaceListed(list []string, namespace string) bool {
	return slices.ContainsFunc(list, func(n string) bool { return n == AllNamespaces || n == namespace })
}

func (i *Identities) credential(key types.NamespacedName, version string, spec credentials.Spec) (azcore.TokenCredential, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if c, ok := i.creds[key]; ok && c.version == version {
		return c.cred, nil
	}
	cred, err := credentials.New(spec)
	if err != nil {
		return nil, err
	}
	if i.creds == nil {
		i.creds = map[types.NamespacedName]cachedCredential{}
	}
	i.creds[key] = cachedCredential{version: version, cred: cred}
	return cred, nil
}

// secret reads an identity's Secret, which must live in the identity's
// namespace: an identity must not hand its clusters another namespace's
// Secrets.
func (i *Identities) secret(ctx context.Context, id *infrav1.AzureClusterIdentity) (*corev1.Secret, error) {
	ref := id.Spec.ClientSecret
	ns := ref.Namespace
	if ns == "" {
		ns = id.Namespace
	}
	if ns != id.Namespace {
		return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("AzureClusterIdentity %s/%s references a Secret in namespace %q: it must be in the identity's namespace", id.Namespace, id.Name, ns)}
	}
	if ref.Name == "" {
		return nil, &identityError{InvalidIdentityReason, fmt.Sprintf("AzureClusterIdentity %s/%s of type %s needs spec.clientSecret", id.Namespace, id.Name, id.Spec.Type)}
	}
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	s, err := i.readSecret(ctx, key)
	if apierrors.IsNotFound(err) {
		return nil, &identityError{IdentitySecretNotFoundReason, fmt.Sprintf("Secret %s/%s of AzureClusterIdentity %s/%s does not exist", ns, ref.Name, id.Namespace, id.Name)}
	}
	return s, err
}

// readSecret returns an identity Secret, reading its data from the API
// server only when its resourceVersion changed; callers must not modify it.
// Every reconcile of every AzureCluster, AzureMachine and pool machine needs
// its identity's Secret: a GET each time was a quarter of the management API
// server's requests at 500 machines. A metadata-only informer says which
// version is current without holding any Secret's data, and sees a rotation
// as soon as its watch delivers it; the data is read once per version and
// kept for the identity Secrets in use only.
func (i *Identities) readSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	if i.Watch != nil {
		s, ok, err := i.Watch.Get(ctx, key)
		if ok && !apierrors.IsNotFound(err) {
			return s, err
		}
		// Not listed yet, or not there: a Secret created a moment ago
		// is not reported missing before the API server says so.
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := i.Client.Get(ctx, key, meta)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	i.mu.Lock()
	kept := i.secrets[key]
	i.mu.Unlock()
	if err == nil && kept != nil && kept.ResourceVersion == meta.ResourceVersion {
		return kept, nil
	}
	// A version the cache does not have yet, or a Secret it has not seen
	// (created a moment ago, or deleted): the API server decides, so a
	// lagging cache never reports a fresh Secret missing.
	s := &corev1.Secret{}
	if err := i.Reader.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			i.mu.Lock()
			delete(i.secrets, key)
			i.mu.Unlock()
		}
		return nil, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.secrets == nil {
		i.secrets = map[types.NamespacedName]*corev1.Secret{}
	}
	i.secrets[key] = s
	return s, nil
}

// namespaceAllowed follows CAPZ: nil allows no namespace, {} every
// namespace; otherwise the namespace is listed or matches the selector (an
// empty selector matches none).
func (i *Identities) namespaceAllowed(ctx context.Context, a *infrav1.AllowedNamespaces, namespace string) (bool, error) {
	if a == nil {
		return false, nil
	}
	if reflect.DeepEqual(*a, infrav1.AllowedNamespaces{}) {
		return true, nil
	}
	for _, n := range a.NamespaceList {
		if n == namespace {
			return true, nil
		}
	}
	if a.Selector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Selector)
	if err != nil || sel.Empty() {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := i.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return sel.Matches(labelSet(ns.Labels)), nil
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

// environment is the cluster's cloud; nil means the manager's. A Custom
// cloud must be one the operator configured: its hosts receive the
// identity's client secret or federated token and then its ARM tokens.
func (i *Identities) environment(env *infrav1.AzureEnvironment) (*endpoint.Config, string, error) {
	if env == nil {
		return nil, "", nil
	}
	shared, err := i.Cloud.Shared()
	if err != nil {
		return nil, "", err
	}
	if c, ok := endpoint.NamedCloud(string(env.Name)); ok {
		return &endpoint.Config{Cloud: &c, Retry: shared.Retry}, string(env.Name), nil
	}
	if env.Name != infrav1.AzureCustomCloud || env.ResourceManagerEndpoint == "" || env.ActiveDirectoryAuthorityHost == "" {
		return nil, "", &identityError{InvalidConfigurationReason, "spec.azureEnvironment: a Custom cloud needs resourceManagerEndpoint and activeDirectoryAuthorityHost"}
	}
	// The manager's own endpoint, which the operator configured with
	// its CA.
	if own := i.Cloud.Endpoint; own.Cloud == nil && cloud.SameEndpoint(own.ResourceManagerEndpoint, env.ResourceManagerEndpoint) &&
		cloud.SameEndpoint(own.Authority(), env.ActiveDirectoryAuthorityHost) {
		cfg := shared
		cfg.Credential = nil
		return &cfg, "Custom|manager", nil
	}
	for _, c := range i.CustomClouds {
		if c.Matches(env.ResourceManagerEndpoint, env.ActiveDirectoryAuthorityHost) {
			cfg, err := i.customCloud(c, shared)
			return cfg, "Custom|" + c.Name, err
		}
	}
	configured := "none"
	if len(i.CustomClouds) > 0 {
		var names []string
		for _, c := range i.CustomClouds {
			names = append(names, c.String())
		}
		configured = strings.Join(names, "; ")
	}
	return nil, "", &identityError{CustomCloudNotConfiguredReason, fmt.Sprintf("spec.azureEnvironment names a Custom cloud (resourceManagerEndpoint %s, activeDirectoryAuthorityHost %s) that the manager is not configured to use, so no credential is sent there: use one of the manager's custom clouds (%s), or have the operator add this cloud with the manager's --custom-cloud flag",
		env.ResourceManagerEndpoint, env.ActiveDirectoryAuthorityHost, configured)}
}

// customCloud is a configured cloud's endpoint, its transport (with the
// cloud's CA) built once and shared by every identity using the cloud.
func (i *Identities) customCloud(c cloud.CustomCloud, shared endpoint.Config) (*endpoint.Config, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if cfg, ok := i.clouds[c.Name]; ok {
		return cfg, nil
	}
	cfg, err := endpoint.Config{ResourceManagerEndpoint: c.ResourceManagerEndpoint, AuthorityHost: c.AuthorityHost, CACertPEM: c.CACertPEM, Retry: shared.Retry}.Shared()
	if err != nil {
		return nil, fmt.Errorf("custom cloud %s: %w", c.Name, err)
	}
	if i.clouds == nil {
		i.clouds = map[string]*endpoint.Config{}
	}
	i.clouds[c.Name] = &cfg
	return &cfg, nil
}

// azureReason is the condition reason of a failed Azure call: Azure's own
// code for authentication and authorization failures, which the user
// fixes outside winkube (a role assignment, a secret), else AzureError.
func azureReason(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.ErrorCode {
		case "AuthorizationFailed", "AuthenticationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken",
			"InvalidAuthenticationTokenAudience", "InvalidAuthenticationTokenTenant", "LinkedAuthorizationFailed":
			return re.ErrorCode
		}
	}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) {
		return IdentityAuthenticationFailedReason
	}
	return AzureErrorReason
}

// clustersOfIdentity maps an AzureClusterIdentity to the AzureClusters
// that reference it, so that fixing an identity resumes them.
func clustersOfIdentity(c client.Client) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &infrav1.AzureClusterList{}
		if err := c.List(ctx, list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, ac := range list.Items {
			ref := ac.Spec.IdentityRef
			if ref == nil || ref.Name != obj.GetName() {
				continue
			}
			ns := ref.Namespace
			if ns == "" {
				ns = ac.Namespace
			}
			if ns == obj.GetNamespace() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ac)})
			}
		}
		return out
	})
}

// userAssignedClientID reads a user-assigned identity's client ID as the
// cluster's identity sees it.
func (i *Identities) userAssignedClientID(ctx context.Context, ac *infrav1.AzureCluster, providerID string) (string, error) {
	svc, err := i.Services(ctx, ac)
	if err != nil {
		return "", err
	}
	return svc.Identities.ClientID(ctx, providerID)
}
