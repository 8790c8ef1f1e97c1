package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/controllers"
)

// clusterFixture creates, as the tenant, a Cluster and its AzureCluster,
// returning the AzureCluster's creation error (which a webhook may refuse).
func (tn *tenantNS) clusterFixture(t *testing.T, name string, mutate func(*infrav1.AzureClusterSpec)) (*fixture, error) {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, ns: tn.ns}
	f.cluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.ns}, Spec: clusterv1.ClusterSpec{
		ClusterNetwork: clusterv1.ClusterNetwork{
			Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
			Services: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12"}},
		},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: name},
	}}
	if err := tn.c.Create(ctx, f.cluster); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := &clusterv1.Cluster{}
		if env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.cluster), c) == nil {
			p := client.MergeFrom(c.DeepCopy())
			c.Spec.Paused = ptr.To(true)
			_ = env.Client.Patch(context.Background(), c, p)
		}
	})
	f.ac = &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: f.cluster.UID}}},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: tn.ns},
	}
	if mutate != nil {
		mutate(&f.ac.Spec)
	}
	return f, tn.c.Create(ctx, f.ac)
}

// recorder is a TLS server on loopback, with a certificate the manager
// trusts, that records every connection and request it gets: the tenant's
// own "Entra ID" and "ARM".
type recorder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	conns int
	reqs  []string
}

func newRecorder(t *testing.T, issuer *arm.Server) *recorder {
	t.Helper()
	cert, err := issuer.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Method+" "+req.URL.Path+" "+string(body))
		r.mu.Unlock()
		// Play Entra ID's discovery, so that a client that trusts this
		// host goes on to post its credential.
		if tenant, ok := strings.CutSuffix(req.URL.Path, "/v2.0/.well-known/openid-configuration"); ok {
			base := "https://" + req.Host + tenant
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"token_endpoint":%q,"authorization_endpoint":%q,"issuer":%q}`, base+"/oauth2/v2.0/token", base+"/oauth2/v2.0/authorize", base+"/v2.0")
			return
		}
		http.Error(w, "recorded", http.StatusBadRequest)
	}))
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
		}
	}
	r.srv.StartTLS()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == 0 && len(r.reqs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d connections, requests %q", r.conns, r.reqs)
}

// TestTenantCannotSendAnIdentitysCredentialToItsServer: a tenant allowed to
// use an identity (not to read its secret) names a Custom cloud whose
// endpoints are its own server. The manager refuses before any token
// request: the server sees no connection, so neither the client secret nor
// a token. A Custom cloud the operator configured (--custom-cloud) works,
// and the webhook refuses endpoints dressed up with a user-info part.
func TestTenantCannotSendAnIdentitysCredentialToItsServer(t *testing.T) {
	w := newEntraWorld(t)
	stack := newEntraWorld(t) // a second cloud, which the operator configures
	logs := &syncBuffer{}
	startLoggedControllersWith(t, w.cfg, logs, func(o *controllers.Options) {
		o.CustomClouds = []cloud.CustomCloud{{Name: "stack", ResourceManagerEndpoint: stack.emu.URL(), AuthorityHost: stack.login.URL(), CACertPEM: stack.emu.CACertPEM()}}
	})
	tn := newTenant(t, "team-evil")
	// The operator's identity, in its own namespace, allows the tenant's.
	ids := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "identities-"}}
	if err := env.Client.Create(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
	sp, secret := w.principal(t, "shared", subscription)
	createIdentity(t, ids.Name, "shared", sp, secret, &infrav1.AllowedNamespaces{NamespaceList: []string{tn.ns}})
	evil := newRecorder(t, w.emu)

	t.Run("a Custom cloud on the tenant's server", func(t *testing.T) {
		f, err := tn.clusterFixture(t, "leak", func(s *infrav1.AzureClusterSpec) {
			s.IdentityRef = &infrav1.IdentityReference{Name: "shared", Namespace: ids.Name}
			s.AzureEnvironment = &infrav1.AzureEnvironment{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: evil.srv.URL, ActiveDirectoryAuthorityHost: evil.srv.URL}
		})
		if err != nil {
			// The webhook may refuse it outright; that is as good.
			if got := evil.seen(); got != "" {
				t.Fatalf("refused, but the tenant's server got %s", got)
			}
			return
		}
		var leaked string
		env.Until(t, time.Minute, func(r client.Reader) string {
			if leaked = evil.seen(); leaked != "" {
				return ""
			}
			if err := r.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
				return err.Error()
			}
			if c := conditions.Get(f.ac, controllers.ReadyCondition); c != nil && c.Reason == controllers.CustomCloudNotConfiguredReason {
				return ""
			}
			return "waiting for Ready reason " + controllers.CustomCloudNotConfiguredReason + ": " + strings.Join(conditionLines(f.ac.Status.Conditions), "; ")
		})
		if leaked != "" {
			t.Fatalf("the manager reached the tenant's server with the identity's credential: %s", leaked)
		}
		c := conditions.Get(f.ac, controllers.ReadyCondition)
		if !strings.Contains(c.Message, evil.srv.URL) || !strings.Contains(c.Message, "--custom-cloud") || !strings.Contains(c.Message, "stack (resourceManagerEndpoint "+stack.emu.URL()) {
			t.Errorf("the condition does not say what the operator must configure: %s", c.Message)
		}
		// Looked at again (a poke), still nothing.
		f.poke()
		f.waitReadyReason(controllers.CustomCloudNotConfiguredReason)
		if got := evil.seen(); got != "" {
			t.Fatalf("the tenant's server got %s", got)
		}
		// Nor may the cluster move to another cloud, or another identity,
		// once created.
		for what, change := range map[string]func(*infrav1.AzureClusterSpec){
			"spec.azureEnvironment": func(s *infrav1.AzureClusterSpec) { s.AzureEnvironment.ResourceManagerEndpoint = stack.emu.URL() },
			"spec.identityRef":      func(s *infrav1.AzureClusterSpec) { s.IdentityRef.Name = "another" },
		} {
			ac := f.ac.DeepCopy()
			p := client.MergeFrom(f.ac)
			change(&ac.Spec)
			if err := tn.c.Patch(f.ctx, ac, p); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), what+": Forbidden") {
				t.Errorf("changing %s: %v", what, err)
			}
		}
	})

	t.Run("endpoints dressed up as a configured cloud's", func(t *testing.T) {
		host := strings.TrimPrefix(stack.login.URL(), "https://")
		for i, u := range []string{
			"https://" + host + "@" + strings.TrimPrefix(evil.srv.URL, "https://"),
			evil.srv.URL + "/" + host,
		} {
			_, err := tn.clusterFixture(t, fmt.Sprintf("dressed-%d", i), func(s *infrav1.AzureClusterSpec) {
				s.IdentityRef = &infrav1.IdentityReference{Name: "shared", Namespace: ids.Name}
				s.AzureEnvironment = &infrav1.AzureEnvironment{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: stack.emu.URL(), ActiveDirectoryAuthorityHost: u}
			})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "https://host[:port]") {
				t.Errorf("authority host %s: want the webhook's refusal, got %v", u, err)
			}
		}
		if got := evil.seen(); got != "" {
			t.Fatalf("the tenant's server got %s", got)
		}
	})

	t.Run("a Custom cloud the operator configured", func(t *testing.T) {
		spS, secretS := stack.principal(t, "stack-team", subscription)
		createIdentity(t, ids.Name, "stack-team", spS, secretS, &infrav1.AllowedNamespaces{NamespaceList: []string{tn.ns}})
		f, err := tn.clusterFixture(t, "onstack", func(s *infrav1.AzureClusterSpec) {
			s.ResourceGroup = tn.ns + "-stack"
			s.IdentityRef = &infrav1.IdentityReference{Name: "stack-team", Namespace: ids.Name}
			// As the operator wrote them but for a trailing slash.
			s.AzureEnvironment = &infrav1.AzureEnvironment{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: stack.emu.URL() + "/", ActiveDirectoryAuthorityHost: stack.login.URL()}
		})
		if err != nil {
			t.Fatal(err)
		}
		f.waitClusterProvisioned(2 * time.Minute)
		if armCalls(stack.emu) == 0 {
			t.Fatal("the configured cloud got no ARM call")
		}
		if got := evil.seen(); got != "" {
			t.Fatalf("the tenant's server got %s", got)
		}
	})
	if strings.Contains(logs.String(), secret) {
		t.Error("the identity's secret is in the manager's logs")
	}
}

// TestClusterWithoutIdentityIsRefusedOutsideListedNamespaces: the manager
// has a credential of its own, enabled for one namespace. A tenant's
// cluster without an identityRef elsewhere is refused, saying what to do,
// and nothing is asked of Azure; in the listed namespace it is served.
func TestClusterWithoutIdentityIsRefusedOutsideListedNamespaces(t *testing.T) {
	emu, cfg := newEmulator(t, arm.Options{})
	listed := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manager-credential-"}}
	if err := env.Client.Create(context.Background(), listed); err != nil {
		t.Fatal(err)
	}
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.ManagerCredentialNamespaces = []string{listed.Name} })
	defer stop()
	tn := newTenant(t, "team-implicit")
	f, err := tn.clusterFixture(t, "implicit", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := f.waitReadyReason(controllers.ManagerCredentialNotAllowedReason)
	if !strings.Contains(c.Message, "--manager-credential-namespaces") || !strings.Contains(c.Message, "spec.identityRef") || !strings.Contains(c.Message, tn.ns) {
		t.Errorf("the condition does not say what to change: %s", c.Message)
	}
	f.poke()
	f.waitReadyReason(controllers.ManagerCredentialNotAllowedReason)
	if n := armCalls(emu); n != 0 {
		t.Fatalf("the manager made %d ARM calls for a cluster it must refuse: %v", n, emu.Counters())
	}
	if groups := listGroups(t, cfg); len(groups) != 0 {
		t.Fatalf("resource groups in Azure: %v", groups)
	}

	// The listed namespace's clusters act as the manager's credential.
	ok := &tenantNS{ns: listed.Name, c: env.Client}
	g, err := ok.clusterFixture(t, "allowed", nil)
	if err != nil {
		t.Fatal(err)
	}
	g.waitClusterProvisioned(time.Minute)
}

func listGroups(t *testing.T, cfg endpoint.Config) []string {
	t.Helper()
	var out []string
	p := newAzure(t, cfg).groups.NewListPager(nil)
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range page.Value {
			out = append(out, *g.Name)
		}
	}
	return out
}

// TestMachineWithoutItsClusterDoesNotActAsTheManager: a tenant removes its
// AzureCluster (it may edit its finalizers) and deletes a machine. The
// manager has a credential of its own, not enabled for the namespace: the
// machine must not be deleted with it, nor with any credential but its
// cluster's identity. It waits, saying why, and the VM stays; once the
// AzureCluster is back its deletion finishes as the identity.
func TestMachineWithoutItsClusterDoesNotActAsTheManager(t *testing.T) {
	parallel(t)
	w := newEntraWorld(t)
	own, ownSecret := w.principal(t, "winkube-manager", subscription)
	cfg := w.cfg
	cfg.Credential = w.credential(t, own, ownSecret)
	stop := startControllersWith(t, cfg, func(o *controllers.Options) { o.ManagerCredentialNamespaces = nil })
	defer stop()
	tn := newTenant(t, "team-orphan")
	sp, secret := w.principal(t, "team-orphan", subscription)
	createIdentity(t, tn.ns, "team", sp, secret, &infrav1.AllowedNamespaces{NamespaceList: []string{tn.ns}})
	f, err := tn.clusterFixture(t, "orphan", func(s *infrav1.AzureClusterSpec) { s.IdentityRef = &infrav1.IdentityReference{Name: "team"} })
	if err != nil {
		t.Fatal(err)
	}
	f.waitClusterProvisioned(2 * time.Minute)
	am := f.newMachine("orphan-md-aaaaa-bbbbb", false, false, "")
	f.waitMachinesProvisioned(2*time.Minute, am.Name)
	az := newAzure(t, cfg)
	vmExists := func() bool {
		_, err := az.vms.Get(context.Background(), tn.ns, am.Name, nil)
		return err == nil
	}
	if !vmExists() {
		t.Fatal("the machine's VM is not in Azure")
	}

	// The tenant pauses its cluster, removes the AzureCluster without its
	// finalizer running, deletes the machine and resumes.
	ctx := context.Background()
	setPaused := func(v bool) {
		c := &clusterv1.Cluster{}
		if err := tn.c.Get(ctx, client.ObjectKeyFromObject(f.cluster), c); err != nil {
			t.Fatal(err)
		}
		p := client.MergeFrom(c.DeepCopy())
		c.Spec.Paused = ptr.To(v)
		if err := tn.c.Patch(ctx, c, p); err != nil {
			t.Fatal(err)
		}
	}
	setPaused(true)
	env.Until(t, time.Minute, func(r client.Reader) string {
		got := &infrav1.AzureMachine{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(am), got); err != nil {
			return err.Error()
		}
		if c := conditions.Get(got, clusterv1.PausedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return "waiting for the machine to be paused"
		}
		return ""
	})
	ac := &infrav1.AzureCluster{}
	if err := tn.c.Get(ctx, client.ObjectKeyFromObject(f.ac), ac); err != nil {
		t.Fatal(err)
	}
	p := client.MergeFrom(ac.DeepCopy())
	ac.Finalizers = nil
	if err := tn.c.Patch(ctx, ac, p); err != nil {
		t.Fatal(err)
	}
	if err := tn.c.Delete(ctx, ac); err != nil {
		t.Fatal(err)
	}
	if err := tn.c.Delete(ctx, am); err != nil {
		t.Fatal(err)
	}
	setPaused(false)

	var deleted bool
	var msg string
	env.Until(t, time.Minute, func(r client.Reader) string {
		got := &infrav1.AzureMachine{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(am), got); apierrors.IsNotFound(err) {
			deleted = true
			return ""
		} else if err != nil {
			return err.Error()
		}
		if c := conditions.Get(got, controllers.ReadyCondition); c != nil && strings.Contains(c.Message, "the AzureCluster of cluster") {
			msg = c.Message
			return ""
		}
		return "waiting for the machine to say its AzureCluster is gone: " + strings.Join(conditionLines(got.Status.Conditions), "; ")
	})
	if deleted || !vmExists() {
		t.Fatalf("the machine's deletion went ahead without its AzureCluster (machine gone %v, VM gone %v): it acted as another credential", deleted, !vmExists())
	}
	if !strings.Contains(msg, "recreate the AzureCluster") {
		t.Errorf("the condition does not say what to do: %s", msg)
	}

	// The AzureCluster back, with its identity: the deletion finishes.
	back := &infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Name: f.ac.Name, Namespace: tn.ns, Labels: f.ac.Labels, OwnerReferences: f.ac.OwnerReferences},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: tn.ns, IdentityRef: &infrav1.IdentityReference{Name: "team"}}}
	if err := tn.c.Create(ctx, back); err != nil {
		t.Fatal(err)
	}
	// The machine waits out its backoff unless something changes: the
	// tenant nudges it now and then.
	var nudged time.Time
	env.Until(t, 2*time.Minute, func(r client.Reader) string {
		got := &infrav1.AzureMachine{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(am), got); err == nil {
			if time.Since(nudged) > 2*time.Second {
				nudged = time.Now()
				p := client.MergeFrom(got.DeepCopy())
				got.Annotations = map[string]string{"test.winkube.dev/poke": nudged.Format(time.RFC3339Nano)}
				_ = tn.c.Patch(ctx, got, p)
			}
			return "the machine is still there: " + strings.Join(conditionLines(got.Status.Conditions), "; ")
		} else if !apierrors.IsNotFound(err) {
			return err.Error()
		}
		if vmExists() {
			return "the VM is still there"
		}
		return ""
	})
}
