package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azurecloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

const tenant = "00000000-0000-4000-8000-00000000a11d"

// entraWorld is an emulator whose ARM accepts only its Entra ID's tokens.
type entraWorld struct {
	dir   *entra.Directory
	emu   *arm.Server
	login *entra.Server
	rt    *arm.RecordingRuntime
	// cfg is the controllers' endpoint: no credential of their own.
	cfg endpoint.Config
}

func newEntraWorld(t *testing.T) *entraWorld {
	t.Helper()
	dir, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &arm.RecordingRuntime{}
	emu, err := arm.New(arm.Options{Directory: dir, PollInterval: 10 * time.Millisecond, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	cert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	login, err := entra.Serve(dir, "127.0.0.1:0", cert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = login.Close() })
	return &entraWorld{dir: dir, emu: emu, login: login, rt: rt, cfg: endpoint.Config{
		ResourceManagerEndpoint: emu.URL(), AuthorityHost: login.URL(), CACertPEM: emu.CACertPEM(),
		Retry: &policy.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: time.Second},
	}}
}

// principal makes a service principal with Contributor on a subscription.
func (w *entraWorld) principal(t *testing.T, name, sub string) (entra.Principal, string) {
	t.Helper()
	p, secret, err := w.dir.CreateServicePrincipal(tenant, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.dir.AssignRole(p.ObjectID, "Contributor", "/subscriptions/"+sub); err != nil {
		t.Fatal(err)
	}
	return p, secret
}

// credential is a principal's own client-secret credential, as a user's
// program outside winkube would build it.
func (w *entraWorld) credential(t *testing.T, p entra.Principal, secret string) azcore.TokenCredential {
	t.Helper()
	shared, err := w.cfg.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := azidentity.NewClientSecretCredential(p.TenantID, p.ClientID, secret, &azidentity.ClientSecretCredentialOptions{
		ClientOptions:            azcore.ClientOptions{Cloud: azurecloud.Configuration{ActiveDirectoryAuthorityHost: w.login.URL()}, Transport: shared.Transport},
		DisableInstanceDiscovery: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// syncBuffer collects the manager's logs.
type syncBuffer = testenv.SyncBuffer

// startLoggedControllers runs the controllers with their logs, at debug
// level, going to logs.
func startLoggedControllers(t *testing.T, cfg endpoint.Config, logs *syncBuffer, tokenFile ...string) {
	t.Helper()
	startLoggedControllersWith(t, cfg, logs, func(o *controllers.Options) {
		if len(tokenFile) > 0 {
			o.FederatedTokenFile = tokenFile[0]
		}
	})
}

// startLoggedControllersWith is startLoggedControllers with a change to
// the controllers' options.
func startLoggedControllersWith(t *testing.T, cfg endpoint.Config, logs *syncBuffer, change func(*controllers.Options)) {
	t.Helper()
	mo := managerOptions(t)
	mo.Logger = zap.New(zap.WriteTo(logs), zap.UseDevMode(true))
	mgr, err := ctrl.NewManager(env.Config, mo)
	if err != nil {
		t.Fatal(err)
	}
	o := controllers.Options{Cloud: cloud.New(cfg), Concurrency: 4, Requeue: 50 * time.Millisecond, SkipNameValidation: true}
	change(&o)
	if err := controllers.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runManager(t, mgr))
}

// createIdentity stores a service principal's secret and its
// AzureClusterIdentity in a namespace.
func createIdentity(t *testing.T, ns, name string, p entra.Principal, secret string, allowed *infrav1.AllowedNamespaces) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-secret", Namespace: ns}, StringData: map[string]string{infrav1.ClientSecretKey: secret}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	id := &infrav1.AzureClusterIdentity{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: infrav1.AzureClusterIdentitySpec{Type: infrav1.ServicePrincipal, TenantID: p.TenantID, ClientID: p.ClientID,
			ClientSecret: corev1.SecretReference{Name: s.Name}, AllowedNamespaces: allowed},
	}
	if err := env.Client.Create(ctx, id); err != nil {
		t.Fatal(err)
	}
}

func withIdentity(sub, name, ns string) func(*infrav1.AzureClusterSpec) {
	return func(s *infrav1.AzureClusterSpec) {
		s.SubscriptionID = sub
		s.IdentityRef = &infrav1.IdentityReference{Name: name, Namespace: ns}
	}
}

// readyReason waits until the AzureCluster's Ready condition has a reason
// and returns the condition.
func (f *fixture) waitReadyReason(reason string) metav1.Condition {
	f.t.Helper()
	var got metav1.Condition
	env.Until(f.t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
			return err.Error()
		}
		if c := conditions.Get(f.ac, controllers.ReadyCondition); c != nil && c.Reason == reason {
			got = *c
			return ""
		}
		return "waiting for Ready reason " + reason + ": " + strings.TrimSpace(strings.Join(conditionLines(f.ac.Status.Conditions), "; "))
	})
	return got
}

func conditionLines(cs []metav1.Condition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Type+"="+string(c.Status)+" "+c.Reason+": "+c.Message)
	}
	return out
}

// poke makes the controllers look at the AzureCluster again.
func (f *fixture) poke() {
	f.t.Helper()
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
		f.t.Fatal(err)
	}
	p := client.MergeFrom(f.ac.DeepCopy())
	if f.ac.Annotations == nil {
		f.ac.Annotations = map[string]string{}
	}
	f.ac.Annotations["test.winkube.dev/poke"] = time.Now().Format(time.RFC3339Nano)
	if err := env.Client.Patch(f.ctx, f.ac, p); err != nil {
		f.t.Fatal(err)
	}
}

func armCalls(s *arm.Server) int64 {
	var n int64
	for _, v := range s.Counters() {
		n += v
	}
	return n
}

// TestIdentities covers one manager serving clusters of two teams, each
// acting as its own service principal on its own subscription through the
// real azidentity credentials and the emulator's Entra ID, and what the
// manager does when an identity may not or can no longer be used. No
// secret or token reaches the manager's logs.
func TestIdentities(t *testing.T) {
	parallel(t)
	w := newEntraWorld(t)
	logs := &syncBuffer{}
	startLoggedControllers(t, w.cfg, logs)
	const subA, subB = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
	spA, secretA := w.principal(t, "team-a", subA)
	spB, secretB := w.principal(t, "team-b", subB)
	secrets := []string{secretA, secretB}
	clients := []string{spA.ClientID, spB.ClientID}

	fA := newCluster(t, "team-a", withIdentity(subA, "team-a", ""))
	createIdentity(t, fA.ns, "team-a", spA, secretA, &infrav1.AllowedNamespaces{NamespaceList: []string{fA.ns}})
	fB := newCluster(t, "team-b", withIdentity(subB, "team-b", ""))
	createIdentity(t, fB.ns, "team-b", spB, secretB, &infrav1.AllowedNamespaces{NamespaceList: []string{fB.ns}})

	t.Run("two teams, two identities, two subscriptions", func(t *testing.T) {
		fA.t, fB.t = t, t
		fA.waitClusterProvisioned(2 * time.Minute)
		fB.waitClusterProvisioned(2 * time.Minute)
		// Each principal sees its own subscription and not the other's.
		opts, err := w.cfg.ClientOptions()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			p              entra.Principal
			secret         string
			own, other, rg string
		}{{spA, secretA, subA, subB, fA.ns}, {spB, secretB, subB, subA, fB.ns}} {
			cred := w.credential(t, c.p, c.secret)
			own, _ := armresources.NewResourceGroupsClient(c.own, cred, opts)
			if _, err := own.Get(context.Background(), c.rg, nil); err != nil {
				t.Fatalf("principal %d cannot read its cluster's resource group: %v", i, err)
			}
			other, _ := armresources.NewResourceGroupsClient(c.other, cred, opts)
			_, err := other.Get(context.Background(), c.rg, nil)
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != 403 || re.ErrorCode != "AuthorizationFailed" ||
				!strings.Contains(err.Error(), "The client '"+c.p.ObjectID+"' with object id '"+c.p.ObjectID+"' does not have authorization to perform action 'Microsoft.Resources/subscriptions/resourceGroups/read' over scope '/subscriptions/"+c.other) {
				t.Fatalf("principal %d reading the other team's subscription: want 403 AuthorizationFailed, got %v", i, err)
			}
		}
		// Team A's identity on team B's subscription: Azure's refusal, as
		// the cluster's condition.
		fX := newCluster(t, "cross", withIdentity(subB, "team-a", fA.ns))
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "team-a", Namespace: fA.ns}, &infrav1.AzureClusterIdentity{}); err != nil {
			t.Fatal(err)
		}
		// Allow fX's namespace on team A's identity, so that it gets as
		// far as Azure.
		id := &infrav1.AzureClusterIdentity{}
		_ = env.Client.Get(context.Background(), client.ObjectKey{Name: "team-a", Namespace: fA.ns}, id)
		p := client.MergeFrom(id.DeepCopy())
		id.Spec.AllowedNamespaces.NamespaceList = append(id.Spec.AllowedNamespaces.NamespaceList, fX.ns)
		if err := env.Client.Patch(context.Background(), id, p); err != nil {
			t.Fatal(err)
		}
		// The cloud provider's azure.json acts as the cluster's identity too.
		tmpl := &infrav1.AzureMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "team-a-md", Namespace: fA.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: fA.cluster.Name}},
			Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}}}
		if err := env.Client.Create(context.Background(), tmpl); err != nil {
			t.Fatal(err)
		}
		env.Until(t, time.Minute, func(r client.Reader) string {
			sec := &corev1.Secret{}
			if err := r.Get(context.Background(), client.ObjectKey{Namespace: fA.ns, Name: "team-a-md-azure-json"}, sec); err != nil {
				return err.Error()
			}
			var cfg azurejson.Config
			if err := json.Unmarshal(sec.Data[azurejson.WorkerNodeKey], &cfg); err != nil {
				return err.Error()
			}
			if cfg.AADClientID != spA.ClientID || cfg.AADClientSecret != secretA || cfg.TenantID != tenant || cfg.UseManagedIdentityExtension {
				return fmt.Sprintf("azure.json does not carry team A's service principal: client %q tenant %q managed identity %v", cfg.AADClientID, cfg.TenantID, cfg.UseManagedIdentityExtension)
			}
			return ""
		})
		fX.t = t
		c := fX.waitReadyReason("AuthorizationFailed")
		if !strings.Contains(c.Message, "does not have authorization to perform action") {
			t.Fatalf("the condition does not carry Azure's message: %s", c.Message)
		}
	})

	t.Run("a namespace the identity does not allow gets no token", func(t *testing.T) {
		spC, secretC := w.principal(t, "team-c", subA)
		secrets = append(secrets, secretC)
		clients = append(clients, spC.ClientID)
		home := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-c-"}}
		if err := env.Client.Create(context.Background(), home); err != nil {
			t.Fatal(err)
		}
		ownNamespace(t, home.Name)
		createIdentity(t, home.Name, "team-c", spC, secretC, &infrav1.AllowedNamespaces{NamespaceList: []string{home.Name}})
		intruder := newCluster(t, "intruder", withIdentity(subA, "team-c", home.Name))
		intruder.t = t
		c := intruder.waitReadyReason(controllers.NamespaceNotAllowedReason)
		if !strings.Contains(c.Message, `does not allow clusters of namespace "`+intruder.ns+`"`) || !strings.Contains(c.Message, "allowedNamespaces") {
			t.Fatalf("the condition does not say what to change: %s", c.Message)
		}
		// A selector that matches nothing, and an identity without
		// allowedNamespaces, refuse too.
		selected := newCluster(t, "selected", withIdentity(subA, "team-c-sel", ""))
		createIdentity(t, selected.ns, "team-c-sel", spC, secretC, &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "c"}}})
		selected.t = t
		selected.waitReadyReason(controllers.NamespaceNotAllowedReason)
		if got := w.dir.TokenRequestsFor(spC.ClientID); got != 0 {
			t.Fatalf("%d token requests for an identity no allowed cluster used", got)
		}
		// Labelling the namespace lets the selector allow it.
		ns := &corev1.Namespace{}
		_ = env.Client.Get(context.Background(), client.ObjectKey{Name: selected.ns}, ns)
		p := client.MergeFrom(ns.DeepCopy())
		ns.Labels["team"] = "c"
		if err := env.Client.Patch(context.Background(), ns, p); err != nil {
			t.Fatal(err)
		}
		selected.poke()
		selected.waitClusterProvisioned(2 * time.Minute)
		if w.dir.TokenRequestsFor(spC.ClientID) == 0 {
			t.Fatal("the allowed cluster was provisioned without a token of its identity")
		}
	})

	t.Run("a rotated secret is picked up without a restart", func(t *testing.T) {
		fA.t = t
		before := w.dir.TokenRequestsFor(spA.ClientID)
		rotated, err := w.dir.ResetSecret(spA.ClientID)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, rotated)
		s := &corev1.Secret{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "team-a-secret", Namespace: fA.ns}, s); err != nil {
			t.Fatal(err)
		}
		s.Data[infrav1.ClientSecretKey] = []byte(rotated)
		if err := env.Client.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		fA.poke()
		poll.Until(t, time.Minute, func() string {
			if w.dir.TokenRequestsFor(spA.ClientID) == before {
				return "no new token request with the rotated secret"
			}
			return ""
		})
		if f := w.dir.TokenFailuresFor(spA.ClientID); f != 0 {
			t.Fatalf("%d token requests of the rotated identity were refused (the old secret was used)", f)
		}
		fA.waitClusterProvisioned(time.Minute)
	})

	t.Run("a removed role assignment is a condition, not a hot loop", func(t *testing.T) {
		fB.t = t
		if n := w.dir.RemoveRoleAssignments(spB.ObjectID, "/subscriptions/"+subB); n != 1 {
			t.Fatalf("removed %d role assignments", n)
		}
		fB.poke()
		c := fB.waitReadyReason("AuthorizationFailed")
		if c.Status != metav1.ConditionFalse {
			t.Fatalf("Ready is %s", c.Status)
		}
		// Over a window, the controllers' backoff bounds the requests: a
		// loop retrying at once would make hundreds.
		start := armCalls(w.emu)
		window := time.NewTimer(3 * time.Second)
		<-window.C
		n := armCalls(w.emu) - start
		if n > 30 {
			t.Fatalf("%d ARM requests in 3s after Azure refused the identity: the controller retries without backing off", n)
		}
		t.Logf("%d ARM requests in the 3s window after the refusal", n)
	})

	// Nothing secret reached the logs: neither a client secret nor any
	// access token the identities were issued.
	out := logs.String()
	if out == "" {
		t.Fatal("no logs were captured")
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatal("a client secret is in the manager's logs")
		}
	}
	for _, c := range clients {
		for _, tok := range w.dir.IssuedTokens(c) {
			if strings.Contains(out, tok) || strings.Contains(out, tok[strings.LastIndex(tok, ".")+1:]) {
				t.Fatal("an access token is in the manager's logs")
			}
		}
	}
}
