// Package credentials builds the Azure SDK credential of an identity: a
// service principal with a secret or a certificate, a workload identity
// (a federated service-account token) or a user-assigned managed
// identity, each talking to the Entra ID of the identity's cloud. It knows
// azidentity, not Kubernetes.
package credentials

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Kind is how an identity authenticates.
type Kind string

// Kinds of identities.
const (
	ClientSecret      Kind = "ClientSecret"
	ClientCertificate Kind = "ClientCertificate"
	WorkloadIdentity  Kind = "WorkloadIdentity"
	ManagedIdentity   Kind = "ManagedIdentity"
)

// Spec is an identity's credential material.
type Spec struct {
	Kind     Kind
	TenantID string
	ClientID string
	// Secret is the client secret (ClientSecret).
	Secret string
	// CertificatePEM holds the certificate and its private key
	// (ClientCertificate), encrypted with CertificatePassword if set.
	CertificatePEM      []byte
	CertificatePassword []byte
	// TokenFile is the federated service-account token (WorkloadIdentity).
	TokenFile string
	// AuthorityHost is the Entra ID endpoint, such as
	// https://login.microsoftonline.com/ (Azure public cloud when empty).
	AuthorityHost string
	// Transport reaches the authority host (the emulator's CA locally).
	Transport policy.Transporter
}

// New builds the credential. Its tokens are cached by azidentity until they
// near expiry, so one credential per identity asks Entra ID once an hour.
func New(s Spec) (azcore.TokenCredential, error) {
	opts := azcore.ClientOptions{Transport: s.Transport}
	if s.AuthorityHost != "" {
		opts.Cloud = cloud.Configuration{ActiveDirectoryAuthorityHost: s.AuthorityHost}
	}
	if s.ClientID == "" {
		return nil, errors.New("the identity has no client ID")
	}
	// MSAL validates an authority host it does not know by asking
	// login.microsoftonline.com; an Entra ID outside Azure's clouds (Azure
	// Stack, the emulator) cannot be vouched for there, so it is trusted
	// as configured.
	custom := CustomAuthority(s.AuthorityHost)
	switch s.Kind {
	case ClientSecret:
		if s.TenantID == "" || s.Secret == "" {
			return nil, errors.New("a service principal needs a tenant ID and a client secret")
		}
		return azidentity.NewClientSecretCredential(s.TenantID, s.ClientID, s.Secret, &azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: custom})
	case ClientCertificate:
		if s.TenantID == "" {
			return nil, errors.New("a service principal needs a tenant ID")
		}
		certs, key, err := azidentity.ParseCertificates(s.CertificatePEM, s.CertificatePassword)
		if err != nil {
			return nil, fmt.Errorf("the certificate: %w", err)
		}
		return azidentity.NewClientCertificateCredential(s.TenantID, s.ClientID, certs, key, &azidentity.ClientCertificateCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: custom})
	case WorkloadIdentity:
		if s.TenantID == "" || s.TokenFile == "" {
			return nil, errors.New("a workload identity needs a tenant ID and a service-account token file (AZURE_FEDERATED_TOKEN_FILE)")
		}
		return azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
			ClientOptions: opts, ClientID: s.ClientID, TenantID: s.TenantID, TokenFilePath: s.TokenFile, DisableInstanceDiscovery: custom,
		})
	case ManagedIdentity:
		// The managed-identity endpoint is the host's (IMDS, or
		// IDENTITY_ENDPOINT/IDENTITY_HEADER), not the authority host.
		return azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
			ClientOptions: azcore.ClientOptions{Transport: s.Transport}, ID: azidentity.ClientID(s.ClientID),
		})
	}
	return nil, fmt.Errorf("unknown identity kind %q", s.Kind)
}

// CustomAuthority says whether an authority host is outside Azure's
// public and sovereign clouds.
func CustomAuthority(host string) bool {
	if host == "" {
		return false
	}
	for _, c := range []cloud.Configuration{cloud.AzurePublic, cloud.AzureGovernment, cloud.AzureChina} {
		if strings.TrimRight(c.ActiveDirectoryAuthorityHost, "/") == strings.TrimRight(host, "/") {
			return false
		}
	}
	return true
}
