package webhooks

import (
	"context"
	"net/url"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azureclusteridentity,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azureclusteridentities,versions=v1alpha1,name=validation.azureclusteridentity.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureClusterIdentity validates identities.
type AzureClusterIdentity struct{}

func validateIdentity(id *infrav1.AzureClusterIdentity) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	s := id.Spec
	if !uuidRE.MatchString(s.ClientID) {
		errs = append(errs, field.Invalid(p.Child("clientID"), s.ClientID, "the application (client) ID is a GUID, as `az ad sp show` prints it as appId"))
	}
	switch s.Type {
	case infrav1.ServicePrincipal, infrav1.ServicePrincipalCertificate, infrav1.WorkloadIdentity:
		if !uuidRE.MatchString(s.TenantID) {
			errs = append(errs, field.Invalid(p.Child("tenantID"), s.TenantID, "a "+string(s.Type)+" identity needs its Entra ID tenant's ID, a GUID (`az account show --query tenantId`)"))
		}
	case infrav1.UserAssignedMSI:
		if s.TenantID != "" && !uuidRE.MatchString(s.TenantID) {
			errs = append(errs, field.Invalid(p.Child("tenantID"), s.TenantID, "a tenant ID is a GUID"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), s.Type, []string{string(infrav1.ServicePrincipal), string(infrav1.ServicePrincipalCertificate), string(infrav1.WorkloadIdentity), string(infrav1.UserAssignedMSI)}))
	}
	sec := p.Child("clientSecret")
	switch s.Type {
	case infrav1.ServicePrincipal, infrav1.ServicePrincipalCertificate:
		if s.ClientSecret.Name == "" {
			what := "the client secret (key " + infrav1.ClientSecretKey + ")"
			if s.Type == infrav1.ServicePrincipalCertificate {
				what = "the PEM certificate and key (key " + infrav1.ClientCertificateKey + ")"
			}
			errs = append(errs, field.Required(sec.Child("name"), "name the Secret holding "+what))
		}
		if s.ClientSecret.Namespace != "" && s.ClientSecret.Namespace != id.Namespace {
			errs = append(errs, field.Invalid(sec.Child("namespace"), s.ClientSecret.Namespace, "the Secret must be in the identity's namespace "+id.Namespace))
		}
	default:
		if s.ClientSecret.Name != "" || s.ClientSecret.Namespace != "" {
			errs = append(errs, field.Forbidden(sec, "a "+string(s.Type)+" identity has no secret: remove clientSecret"))
		}
	}
	if a := s.AllowedNamespaces; a != nil && a.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(a.Selector); err != nil {
			errs = append(errs, field.Invalid(p.Child("allowedNamespaces", "selector"), a.Selector, err.Error()))
		}
	}
	return errs
}

// ValidateCreate checks the identity.
func (AzureClusterIdentity) ValidateCreate(_ context.Context, id *infrav1.AzureClusterIdentity) (admission.Warnings, error) {
	var warn admission.Warnings
	if id.Spec.AllowedNamespaces == nil {
		warn = append(warn, "spec.allowedNamespaces is unset: no cluster may use this identity until it lists their namespaces ({} allows all)")
	}
	return warn, invalid(id, validateIdentity(id))
}

// ValidateUpdate checks the identity; its type cannot change, as its
// clusters' resources were made by the principal it names.
func (AzureClusterIdentity) ValidateUpdate(_ context.Context, old, id *infrav1.AzureClusterIdentity) (admission.Warnings, error) {
	errs := validateIdentity(id)
	if old.Spec.Type != id.Spec.Type {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "type"), "the type cannot change: create another identity and point the clusters' identityRef at it"))
	}
	return nil, invalid(id, errs)
}

// ValidateDelete allows deletion.
func (AzureClusterIdentity) ValidateDelete(context.Context, *infrav1.AzureClusterIdentity) (admission.Warnings, error) {
	return nil, nil
}

// validateClusterIdentity checks a cluster's identityRef and azureEnvironment.
func validateClusterIdentity(s *infrav1.AzureClusterSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.IdentityRef != nil && s.IdentityRef.Name == "" {
		errs = append(errs, field.Required(p.Child("identityRef", "name"), "name the AzureClusterIdentity, or remove identityRef to use the manager's own credential"))
	}
	env := s.AzureEnvironment
	if env == nil {
		return errs
	}
	ep := p.Child("azureEnvironment")
	if s.IdentityRef == nil {
		errs = append(errs, field.Forbidden(ep, "a cluster in another cloud needs an identityRef: the manager's own credential belongs to the manager's cloud"))
	}
	// Only a plain https://host[:port] can equal one of the custom clouds
	// the operator configured the manager with (the controller refuses
	// any other before a credential leaves the manager); a user-info part
	// or a path could otherwise dress a foreign host up as one.
	httpsURL := func(path *field.Path, v string) {
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "" {
			errs = append(errs, field.Invalid(path, v, "an https://host[:port] URL, exactly as one of the custom clouds the winkube manager is configured with (its --custom-cloud flag)"))
		}
	}
	if env.Name == infrav1.AzureCustomCloud {
		httpsURL(ep.Child("resourceManagerEndpoint"), env.ResourceManagerEndpoint)
		httpsURL(ep.Child("activeDirectoryAuthorityHost"), env.ActiveDirectoryAuthorityHost)
	} else if env.ResourceManagerEndpoint != "" || env.ActiveDirectoryAuthorityHost != "" {
		errs = append(errs, field.Forbidden(ep, string(env.Name)+" has well-known endpoints: set them only with name Custom"))
	}
	return errs
}

// validateClusterIdentityUpdate keeps a cluster acting as the identity, and
// in the cloud, it was created with: its resources, and their deletion,
// belong to that principal. Adding an identityRef to a cluster that acted
// as the manager's own credential moves it off that credential.
func validateClusterIdentityUpdate(old, s *infrav1.AzureClusterSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if old.IdentityRef != nil && !apiequality.Semantic.DeepEqual(old.IdentityRef, s.IdentityRef) {
		errs = append(errs, field.Forbidden(p.Child("identityRef"), "cannot change: the cluster's Azure resources were made, and are deleted, as this identity; rotate the identity's secret instead, or create a new cluster"))
	}
	if !apiequality.Semantic.DeepEqual(old.AzureEnvironment, s.AzureEnvironment) {
		errs = append(errs, field.Forbidden(p.Child("azureEnvironment"), "cannot change: the cluster's Azure resources live in this cloud"))
	}
	return errs
}
