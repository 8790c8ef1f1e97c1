package localworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/credentials"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

const (
	entraState = "entra.json"
	// servicePrincipalName is the display name of the service principal
	// the world's clusters act as, as `az ad sp create-for-rbac` would name it.
	servicePrincipalName = "winkube-local-world"
)

// identityName and identitySecretName are the cluster's
// AzureClusterIdentity and the Secret holding its client secret.
func identityName(cluster string) string       { return cluster + "-identity" }
func identitySecretName(cluster string) string { return cluster + "-identity-secret" }

// startDirectory makes the world's Entra ID, from its state when it ran
// before, with the service principal its clusters act as: Contributor on
// the world's subscription, as `az ad sp create-for-rbac --role
// Contributor --scopes /subscriptions/<id>` makes it.
//
// The directory is saved as it changes (the machines' managed identities
// and the role assignments the clusters make come through ARM while the
// world runs), so that a killed winkube loses none of them.
func (w *World) startDirectory() error {
	saver := newWriteBehind("Entra ID", w.saveDirectory, w.opts.Log)
	d, err := entra.New(entra.Options{OnChange: saver.mark})
	if err != nil {
		return err
	}
	path := filepath.Join(w.opts.StateDir, entraState)
	if _, err := os.Stat(path); err == nil {
		if err := d.LoadFile(path); err != nil {
			return err
		}
	}
	w.dir = d
	if err := w.servicePrincipal(); err != nil {
		return err
	}
	// Only now: a directory that failed to load keeps its file.
	w.dirSaver = saver
	w.dirSaver.start()
	return nil
}

// servicePrincipal finds, or makes, the principal the world's clusters
// act as.
func (w *World) servicePrincipal() error {
	d := w.dir
	snap, err := d.Snapshot()
	if err != nil {
		return err
	}
	for _, p := range snap.Principals {
		if p.DisplayName == servicePrincipalName && len(p.Secrets) > 0 {
			w.sp, w.spSecret = p, p.Secrets[0]
			return nil
		}
	}
	if w.sp, w.spSecret, err = d.CreateServicePrincipal(Tenant, servicePrincipalName); err != nil {
		return err
	}
	return d.AssignRole(w.sp.ObjectID, "Contributor", "/subscriptions/"+Subscription)
}

// serveDirectory serves the Entra ID with a certificate from the
// emulator's CA, so that one CA covers ARM and Entra ID.
func (w *World) serveDirectory() error {
	cert, err := w.emu.ServerCertificate("127.0.0.1")
	if err != nil {
		return err
	}
	if w.login, err = entra.Serve(w.dir, "127.0.0.1:0", cert); err != nil {
		return err
	}
	w.emu.SetLoginEndpoint(w.login.URL())
	return nil
}

// Directory is the world's Entra ID, for tests and diagnosis.
func (w *World) Directory() *entra.Directory { return w.dir }

// ServicePrincipal is the principal the world's clusters act as.
func (w *World) ServicePrincipal() entra.Principal { return w.sp }

// createIdentity keeps the service principal's secret in the management
// cluster and makes the AzureClusterIdentity the cluster references,
// allowed in the cluster's namespace only.
func (w *World) createIdentity(ctx context.Context) error {
	name := w.opts.Name
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: identitySecretName(name), Namespace: namespace},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{infrav1.ClientSecretKey: w.spSecret},
	}
	id := &infrav1.AzureClusterIdentity{
		ObjectMeta: metav1.ObjectMeta{Name: identityName(name), Namespace: namespace},
		Spec: infrav1.AzureClusterIdentitySpec{
			Type: infrav1.ServicePrincipal, TenantID: w.sp.TenantID, ClientID: w.sp.ClientID,
			ClientSecret:      corev1.SecretReference{Name: secret.Name, Namespace: namespace},
			AllowedNamespaces: &infrav1.AllowedNamespaces{NamespaceList: []string{namespace}},
		},
	}
	if err := w.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the identity's Secret: %w", err)
	}
	if err := w.Client.Create(ctx, id); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("AzureClusterIdentity %s: %w", id.Name, err)
	}
	return nil
}

// saveDirectory keeps the Entra ID for the next start.
func (w *World) saveDirectory() error {
	if w.dir == nil {
		return nil
	}
	return w.dir.Save(filepath.Join(w.opts.StateDir, entraState))
}

// AsServicePrincipal is the world's Azure as its clusters' service
// principal reaches it, as `az login --service-principal` would: for
// acting on the world's resources outside winkube (tests, diagnosis).
func (w *World) AsServicePrincipal() (endpoint.Config, error) {
	opts, err := w.mgmtCfg.ClientOptions()
	if err != nil {
		return endpoint.Config{}, err
	}
	cfg := w.mgmtCfg
	cfg.Credential, err = credentials.New(credentials.Spec{Kind: credentials.ClientSecret, TenantID: w.sp.TenantID, ClientID: w.sp.ClientID,
		Secret: w.spSecret, AuthorityHost: w.login.URL(), Transport: opts.Transport})
	return cfg, err
}
