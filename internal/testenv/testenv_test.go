package testenv_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{widgetCRD()}}, func(e *testenv.Env) { env = e }))
}

// widgetCRD is a schema-less custom resource no test writes, so the first
// request for it is TestFirstListOfACustomResourceIsServed's.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return testenv.SchemalessCRD("testenv.winkube.dev", "Widget", "widgets", apiextensionsv1.NamespaceScoped)
}

// The API server refuses a LIST of a custom resource whose watch cache
// has not synced with 429 and Retry-After: 1, which client-go waits out
// (a second of nothing for the first test to touch each kind); Start
// must hand over a control plane whose caches are ready.
func TestFirstListOfACustomResourceIsServed(t *testing.T) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/apis/testenv.winkube.dev/v1/widgets", "/apis/testenv.winkube.dev/v1/namespaces/default/widgets"} {
		if err := cs.Discovery().RESTClient().Get().AbsPath(path).MaxRetries(0).Do(context.Background()).Error(); err != nil {
			t.Errorf("the first LIST of %s, not retried: %v", path, err)
		}
	}
}

// The control plane must be the one hack/tools pinned, not whatever envtest
// might find elsewhere.
func TestAPIServerIsThePinnedKubernetes(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.36.3" {
		t.Fatalf("kube-apiserver reports %q, want v1.36.3 (is bin/ stale? run make tools)", v.GitVersion)
	}
}

func TestCreateAndReadBack(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
		Data:       map[string]string{"vni": "4096", "port": "4789"},
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cm) })
	got := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	if got.Data["vni"] != "4096" || got.Data["port"] != "4789" {
		t.Fatalf("read back %v, want what was written", got.Data)
	}
	if got.UID == "" || got.ResourceVersion == "" {
		t.Fatalf("object was not persisted by the API server: uid=%q rv=%q", got.UID, got.ResourceVersion)
	}
	// A second create of the same name must conflict: the API server and etcd
	// are real, not an in-memory fake that accepts anything.
	dup := cm.DeepCopy()
	dup.ResourceVersion = ""
	if err := env.Client.Create(ctx, dup); err == nil {
		t.Fatal("second create of the same ConfigMap succeeded, want AlreadyExists")
	}
}

func TestMissingBinariesAreAClearError(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := testenv.Start(testenv.Options{})
	if err == nil {
		t.Fatal("Start succeeded with an empty bin dir")
	}
	if want := "run `make tools`"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not tell the user to %s", err, want)
	}
}

// Stop kills the API server rather than waiting out its graceful
// shutdown, while a package's webhook manager still watches through its
// cache. The kill must find the process (envtest names its cert dir in the
// arguments as this package expects, or Stop silently takes the slow way
// again); Stop must end the webhook manager first (or the API server waits
// for its watches and envtest waits out its stop timeout and kills it,
// which Stop reports as an error), and must still end both processes and
// remove etcd's data. One control plane serves both checks: a start costs
// more than either.
func TestStopEndsTheWebhookManagerAndKillsTheAPIServer(t *testing.T) {
	e, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	arg := "--cert-dir=" + e.Environment.ControlPlane.GetAPIServer().CertDir
	pid := testenv.ChildWithArg("kube-apiserver", arg)
	if pid == 0 {
		_ = e.Stop()
		t.Fatalf("no child kube-apiserver with %s: Stop cannot kill it", arg)
	}
	etcdData := e.Environment.ControlPlane.Etcd.DataDir
	if etcdData == "" {
		_ = e.Stop()
		t.Fatal("envtest did not say where etcd keeps its data")
	}
	synced := make(chan error, 1)
	err = e.ServeWebhooks(func(mgr ctrl.Manager) error {
		mgr.GetWebhookServer().Register("/noop", http.NotFoundHandler())
		return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			_, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
			synced <- err
			<-ctx.Done()
			return nil
		}))
	})
	if err != nil {
		_ = e.Stop()
		t.Fatal(err)
	}
	if err := <-synced; err != nil {
		_ = e.Stop()
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("stopping the control plane while the webhook manager watches: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("kube-apiserver %d is still there after Stop (%v)", pid, err)
	}
	if _, err := os.Stat(etcdData); !os.IsNotExist(err) {
		t.Errorf("etcd's data directory %s is still there after Stop (%v)", etcdData, err)
	}
}

// TestManagerStoppedAsSoonAsStartedEnds: a package whose tests all skip
// stops its webhook manager the moment it has started, after its API server
// is gone (Env.Stop kills that first). Stopped while its cache was still
// syncing, such a manager never ended, and a goroutine of it spun a core
// (see StartManager). Here lists are answered late, and the API server
// stops answering as soon as StartManager returns: StartManager must have
// waited for the cache, and each stop must end.
func TestManagerStoppedAsSoonAsStartedEnds(t *testing.T) {
	for i := range 3 {
		var down atomic.Bool
		cfg := rest.CopyConfig(env.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if down.Load() {
					return nil, errors.New("the API server is gone")
				}
				if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "" {
					time.Sleep(200 * time.Millisecond)
				}
				return rt.RoundTrip(r)
			})
		}
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
		if err != nil {
			t.Fatal(err)
		}
		// An informer the cache must sync before the manager has started.
		if _, err := mgr.GetCache().GetInformer(context.Background(), &corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
		stop, err := testenv.StartManager(mgr)
		if err != nil {
			t.Fatal(err)
		}
		down.Store(true)
		ended := make(chan error, 1)
		go func() { ended <- stop() }()
		select {
		case err := <-ended:
			if err != nil {
				t.Fatalf("manager %d: %v", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("manager %d, stopped as soon as it had started, had not ended a minute later", i)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Until waits on the informer cache, not on the API server: a wait of a
// second for a ConfigMap to change (polls every 100 ms or less) sends the
// API server no GET of it but the one that confirms the condition once the
// cache has it; and it returns with what the API server holds.
func TestUntilWaitsOnTheCacheAndReturnsTheServersAnswer(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "until-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "flag"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	before := testenv.APIRequests(ctx, t, env.Config, "GET", "configmaps")
	time.AfterFunc(time.Second, func() {
		patch := client.MergeFrom(cm.DeepCopy())
		cm.Data = map[string]string{"done": "yes"}
		if err := env.Client.Patch(ctx, cm, patch); err != nil {
			t.Error(err)
		}
	})
	looks, got := 0, &corev1.ConfigMap{}
	env.Until(t, 30*time.Second, func(r client.Reader) string {
		looks++
		if err := r.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			return err.Error()
		}
		if got.Data["done"] != "yes" {
			return "not done"
		}
		return ""
	})
	gets := testenv.APIRequests(ctx, t, env.Config, "GET", "configmaps") - before
	t.Logf("%d looks, %d GETs of configmaps", looks, gets)
	if looks < 5 {
		t.Fatalf("the condition was looked at %d times in a second's wait; the test needs it polled", looks)
	}
	if gets != 1 {
		t.Errorf("the API server answered %d GETs of configmaps during the wait, want 1 (the confirming read)", gets)
	}
	if got.Data["done"] != "yes" || got.ResourceVersion == "" {
		t.Errorf("Until returned %+v", got)
	}
	// A wait that is over at once still confirms with the API server.
	before = testenv.APIRequests(ctx, t, env.Config, "GET", "configmaps")
	env.Until(t, 30*time.Second, func(r client.Reader) string {
		if err := r.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			return err.Error()
		}
		return ""
	})
	if gets := testenv.APIRequests(ctx, t, env.Config, "GET", "configmaps") - before; gets != 1 {
		t.Errorf("a condition that held at once: %d GETs, want 1", gets)
	}
}
