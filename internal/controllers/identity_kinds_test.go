package controllers_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/controllers"
)

// TestIdentityKinds: a certificate service principal, a workload identity
// (a service-account token of the management cluster's API server,
// trusted by a federated credential) and a user-assigned managed identity
// (App Service's endpoint) each provision a cluster through the real
// azidentity credential of their kind. The last two, proven by the
// manager's own token, are honoured only in the operator's namespace: a
// tenant's copy in its own namespace asks for no token.
func TestIdentityKinds(t *testing.T) {
	w := newEntraWorld(t)
	ctx := context.Background()
	const sub = "00000000-0000-0000-0000-0000000000d1"
	contributor := func(p entra.Principal) {
		if err := w.dir.AssignRole(p.ObjectID, "Contributor", "/subscriptions/"+sub); err != nil {
			t.Fatal(err)
		}
	}

	// Workload identity: the manager's service account, its token from the
	// real API server's TokenRequest, the issuer's keys from its JWKS.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	wiNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "winkube-system-"}}
	if err := env.Client.Create(ctx, wiNS); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "winkube-manager", Namespace: wiNS.Name}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(wiNS.Name).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{entra.DefaultFederatedAudience}, ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	oidc, err := cs.RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var disc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(oidc, &disc); err != nil || disc.Issuer == "" {
		t.Fatalf("the API server's OIDC configuration: %s %v", oidc, err)
	}
	keys, err := cs.RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.dir.TrustIssuer(disc.Issuer, keys); err != nil {
		t.Fatal(err)
	}
	wi, _, err := w.dir.CreateServicePrincipal(tenant, "workload")
	if err != nil {
		t.Fatal(err)
	}
	contributor(wi)
	if err := w.dir.AddFederatedCredential(wi.ClientID, entra.FederatedCredential{Name: "manager", Issuer: disc.Issuer,
		Subject: "system:serviceaccount:" + wiNS.Name + ":" + sa.Name}); err != nil {
		t.Fatal(err)
	}

	// Managed identity: the manager runs where App Service's endpoint is.
	t.Setenv("IDENTITY_ENDPOINT", w.login.ManagedIdentityEndpoint())
	t.Setenv("IDENTITY_HEADER", w.dir.IdentityHeader())
	msi := entra.Principal{Kind: entra.ManagedIdentity, TenantID: tenant, ClientID: entra.NewGUID(), ObjectID: entra.NewGUID(), DisplayName: "msi"}
	if err := w.dir.AddPrincipal(msi); err != nil {
		t.Fatal(err)
	}
	contributor(msi)

	// Certificate: a self-signed certificate registered on the application.
	certSP, _, err := w.dir.CreateServicePrincipal(tenant, "cert")
	if err != nil {
		t.Fatal(err)
	}
	contributor(certSP)
	certPEM, bundle := selfSigned(t)
	if err := w.dir.AddCertificate(certSP.ClientID, certPEM); err != nil {
		t.Fatal(err)
	}

	// The operator's namespace (the manager's) is where the identities
	// proven by the manager's own token live.
	logs := &syncBuffer{}
	startLoggedControllersWith(t, w.cfg, logs, func(o *controllers.Options) {
		o.FederatedTokenFile = tokenFile
		o.AmbientIdentityNamespaces = []string{wiNS.Name}
	})

	for _, tc := range []struct {
		name string
		p    entra.Principal
		spec func(ns string) (infrav1.AzureClusterIdentitySpec, *corev1.Secret)
	}{
		{"certificate", certSP, func(ns string) (infrav1.AzureClusterIdentitySpec, *corev1.Secret) {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cert", Namespace: ns}, Data: map[string][]byte{infrav1.ClientCertificateKey: bundle}}
			return infrav1.AzureClusterIdentitySpec{Type: infrav1.ServicePrincipalCertificate, TenantID: tenant, ClientID: certSP.ClientID, ClientSecret: corev1.SecretReference{Name: "cert"}}, s
		}},
		{"workload", wi, func(string) (infrav1.AzureClusterIdentitySpec, *corev1.Secret) {
			return infrav1.AzureClusterIdentitySpec{Type: infrav1.WorkloadIdentity, TenantID: tenant, ClientID: wi.ClientID}, nil
		}},
		{"msi", msi, func(string) (infrav1.AzureClusterIdentitySpec, *corev1.Secret) {
			return infrav1.AzureClusterIdentitySpec{Type: infrav1.UserAssignedMSI, TenantID: tenant, ClientID: msi.ClientID}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _ := tc.spec("")
			idNS := ""
			if ambient := spec.Type != infrav1.ServicePrincipalCertificate; ambient {
				idNS = wiNS.Name
				// A tenant's copy in its own namespace, naming the same
				// client, allowing everyone: refused before any token.
				tf := newCluster(t, tc.name+"-copy", withIdentity(sub, tc.name, ""))
				spec.AllowedNamespaces = &infrav1.AllowedNamespaces{}
				before := w.dir.TokenRequestsFor(tc.p.ClientID)
				if err := env.Client.Create(ctx, &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: tf.ns}, Spec: spec}); err != nil {
					t.Fatal(err)
				}
				if c := tf.waitReadyReason(controllers.AmbientIdentityNotAllowedReason); !strings.Contains(c.Message, wiNS.Name) {
					t.Errorf("the refusal does not say where such identities go: %s", c.Message)
				}
				if n := w.dir.TokenRequestsFor(tc.p.ClientID); n != before {
					t.Errorf("the tenant's copy of a %s identity asked Entra ID for %d tokens", spec.Type, n-before)
				}
			}
			f := newCluster(t, tc.name, withIdentity(sub, tc.name, idNS))
			spec, secret := tc.spec(f.ns)
			if secret != nil {
				if err := env.Client.Create(ctx, secret); err != nil {
					t.Fatal(err)
				}
			}
			spec.AllowedNamespaces = &infrav1.AllowedNamespaces{}
			if idNS == "" {
				idNS = f.ns
			}
			if err := env.Client.Create(ctx, &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: idNS}, Spec: spec}); err != nil {
				t.Fatal(err)
			}
			f.waitClusterProvisioned(2 * time.Minute)
			if n, bad := w.dir.TokenRequestsFor(tc.p.ClientID), w.dir.TokenFailuresFor(tc.p.ClientID); n == 0 || bad != 0 {
				t.Fatalf("%d token requests, %d refused", n, bad)
			}
			if spec.Type != infrav1.UserAssignedMSI {
				return
			}
			// azure.json names the cluster's identity, and a machine
			// without it could not get its token from IMDS.
			f.newMachine("msi-md-none-aaaaa", false, false, "1")
			am := f.waitMachinesProvisioned(2*time.Minute, "msi-md-none-aaaaa")["msi-md-none-aaaaa"]
			if c := meta.FindStatusCondition(am.Status.Conditions, controllers.CloudProviderCredentialsCondition); c == nil || c.Reason != controllers.IdentityNotAttachedReason || !strings.Contains(c.Message, msi.ClientID) {
				t.Errorf("a machine without the cluster's user-assigned identity: CloudProviderCredentials %+v", c)
			}
		})
	}
}

// selfSigned returns a certificate and the PEM bundle (certificate and
// private key) a ServicePrincipalCertificate Secret holds.
func selfSigned(t *testing.T) (certPEM, bundle []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "winkube-test"}, key)
	if err != nil {
		t.Fatal(err)
	}
	// PKCS #8, as openssl writes a key today; no library here marshals it.
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if certPEM, err = certutil.EncodeCertificates(cert); err != nil {
		t.Fatal(err)
	}
	return certPEM, append(append([]byte(nil), certPEM...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...)
}
