// Package endpoint says where the Azure SDK clients send their requests and
// how they authenticate: Azure public cloud by default, a named sovereign
// cloud, or another ARM endpoint and Entra ID (winkube's emulator) with
// their own CA. Every service package builds its SDK clients from a Config,
// so the code that runs against the emulator is the code that runs against
// Azure.
package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Config is an ARM endpoint and the credential for it.
type Config struct {
	// ResourceManagerEndpoint such as https://127.0.0.1:8443; empty means
	// Azure public cloud (or Cloud when set).
	ResourceManagerEndpoint string
	// AuthorityHost is the Entra ID that issues tokens for
	// ResourceManagerEndpoint, such as https://127.0.0.1:8444.
	AuthorityHost string
	// Cloud, when set, is a named Azure cloud (see NamedCloud) and wins
	// over ResourceManagerEndpoint.
	Cloud *cloud.Configuration
	// CACertPEM, when set, is the only CA the clients trust (the emulator's).
	CACertPEM []byte
	// Credential authenticates requests.
	Credential azcore.TokenCredential
	// Retry overrides the SDK's retry policy (tests shorten its delays) for
	// the clients made from the Config directly; the controllers' services
	// (cloud.Cloud) make one try per call whatever it says.
	Retry *policy.RetryOptions
	// Transport, when set, carries every request (see Shared).
	Transport policy.Transporter
	// DisableRPRegistration turns off the SDK's registration of resource
	// providers on MissingSubscriptionRegistration.
	DisableRPRegistration bool
}

// ClientOptions returns SDK client options for the endpoint.
func (c Config) ClientOptions() (*arm.ClientOptions, error) {
	opts := &arm.ClientOptions{}
	opts.PerRetryPolicies = []policy.Policy{countingPolicy{}}
	if c.Cloud != nil {
		opts.Cloud = *c.Cloud
	} else if c.ResourceManagerEndpoint != "" {
		authority := c.AuthorityHost
		if authority == "" {
			authority = c.ResourceManagerEndpoint
		}
		opts.Cloud = cloud.Configuration{
			ActiveDirectoryAuthorityHost: authority,
			Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
				cloud.ResourceManager: {Endpoint: c.ResourceManagerEndpoint, Audience: c.ResourceManagerEndpoint},
			},
		}
	}
	// The SDK registers a resource provider when Azure answers 409
	// MissingSubscriptionRegistration, in every cloud; a caller whose
	// principal may not register providers turns it off.
	opts.DisableRPRegistration = c.DisableRPRegistration
	if c.Transport != nil {
		opts.Transport = c.Transport
	} else if len(c.CACertPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CACertPEM) {
			return nil, errors.New("endpoint: the CA certificate is not PEM")
		}
		opts.Transport = &http.Client{
			Timeout: 2 * time.Minute,
			Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
				MaxIdleConnsPerHost: 64,
				ForceAttemptHTTP2:   true,
			},
		}
	}
	if c.Retry != nil {
		opts.Retry = *c.Retry
	}
	return opts, nil
}

// StaticToken is a credential that always presents the same bearer token.
// Only tests use it, with an emulator started without an Entra ID; the
// product authenticates through Entra ID (package credentials).
type StaticToken string

// GetToken returns the token, valid for a day.
func (t StaticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(t), ExpiresOn: time.Now().Add(24 * time.Hour)}, nil
}

// NamedCloud is the configuration of a named Azure cloud.
func NamedCloud(name string) (cloud.Configuration, bool) {
	switch name {
	case "AzurePublicCloud":
		return cloud.AzurePublic, true
	case "AzureUSGovernmentCloud":
		return cloud.AzureGovernment, true
	case "AzureChinaCloud":
		return cloud.AzureChina, true
	}
	return cloud.Configuration{}, false
}

// Authority is the Entra ID endpoint of the configuration.
func (c Config) Authority() string {
	switch {
	case c.Cloud != nil:
		return c.Cloud.ActiveDirectoryAuthorityHost
	case c.AuthorityHost != "":
		return c.AuthorityHost
	case c.ResourceManagerEndpoint != "":
		return c.ResourceManagerEndpoint
	}
	return cloud.AzurePublic.ActiveDirectoryAuthorityHost
}

// NewClient builds an SDK client of any kind for the endpoint, from the
// constructor every resource manager client package has.
func NewClient[C any](cfg Config, subscription string, ctor func(string, azcore.TokenCredential, *arm.ClientOptions) (C, error)) (C, error) {
	opts, err := cfg.ClientOptions()
	if err != nil {
		var zero C
		return zero, err
	}
	return ctor(subscription, cfg.Credential, opts)
}

// Shared returns the configuration with its HTTP transport built once, so
// that every client made from it shares one connection pool (ClientOptions
// otherwise builds a transport per client).
func (c Config) Shared() (Config, error) {
	if c.Transport != nil || len(c.CACertPEM) == 0 {
		return c, nil
	}
	opts, err := c.ClientOptions()
	if err != nil {
		return c, err
	}
	c.Transport = opts.Transport
	return c, nil
}

// ResourceManager is the ARM endpoint the configuration's clients call.
func (c Config) ResourceManager() string {
	switch {
	case c.Cloud != nil:
		return c.Cloud.Services[cloud.ResourceManager].Endpoint
	case c.ResourceManagerEndpoint != "":
		return c.ResourceManagerEndpoint
	}
	return cloud.AzurePublic.Services[cloud.ResourceManager].Endpoint
}
