package webhooks_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// A corpus file is YAML documents with directives in leading comments:
//
//	# expect: TEXT        (bad) the refusal must contain TEXT; (good) see below
//	# action: update      the last document replaces the spec of the object
//	                      of the same kind and name created earlier in the file
//
// Every document but the last is set-up and must be accepted. In testdata/bad
// the last document must be refused with a message containing every expected
// text; in testdata/good it must be accepted, and each "expect: KIND/NAME
// PATH=VALUE" is checked on the stored object (VALUE * means non-empty, an
// empty VALUE means absent). Each file runs in a namespace of its own.
type corpusCase struct {
	name    string
	expects []string
	update  bool
	docs    []*unstructured.Unstructured
}

func loadCorpus(t *testing.T, dir string) []corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var cases []corpusCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := corpusCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml")}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "# expect: "); ok {
				c.expects = append(c.expects, v)
			}
			if line == "# action: update" {
				c.update = true
			}
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			obj := map[string]any{}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj) == 0 {
				continue
			}
			c.docs = append(c.docs, &unstructured.Unstructured{Object: obj})
		}
		if len(c.docs) == 0 {
			t.Fatalf("%s has no objects", f)
		}
		cases = append(cases, c)
	}
	return cases
}

// apply creates (or, for the last document of an update case, updates) the
// documents in order and returns the error of the last one.
func (c corpusCase) apply(ctx context.Context, ns string) (lastErr error, setupErr error) {
	for i, obj := range c.docs {
		obj = obj.DeepCopy()
		obj.SetNamespace(ns)
		last := i == len(c.docs)-1
		var err error
		if last && c.update {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(obj.GroupVersionKind())
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return nil, fmt.Errorf("update of %s/%s: the object is not there: %w", obj.GetKind(), obj.GetName(), err)
			}
			// The case's spec replaces the stored one whole, as kubectl
			// replace would: defaulting must restore what it filled in.
			cur.Object["spec"] = obj.Object["spec"]
			cur.SetLabels(obj.GetLabels())
			err = env.Client.Update(ctx, cur)
		} else {
			err = env.Client.Create(ctx, obj)
		}
		if last {
			return err, nil
		}
		if err != nil {
			return nil, fmt.Errorf("set-up object %s/%s was refused: %w", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "AzureMachine" {
			// The VM-name check reads the webhook manager's cache, which
			// sees a machine a moment after its creation (a window the
			// controller covers); a case's next object comes later than
			// that in real use.
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				return webhookCache.Get(ctx, client.ObjectKeyFromObject(obj), &infrav1.AzureMachine{}) == nil, nil
			}); err != nil {
				return nil, fmt.Errorf("set-up machine %s never reached the webhook's cache: %w", obj.GetName(), err)
			}
		}
	}
	return nil, nil
}

func newNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	name = strings.ReplaceAll(name, ".", "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if len(name) > 40 {
		ns.GenerateName = name[:40] + "-"
	}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestBadObjectsAreRefused(t *testing.T) {
	cases := loadCorpus(t, "bad")
	if len(cases) < 30 {
		t.Fatalf("the bad corpus has %d cases, want at least 30", len(cases))
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.expects) == 0 {
				t.Fatal("a bad case must say what the refusal contains (# expect: ...)")
			}
			ns := newNamespace(ctx, t, c.name)
			err, setupErr := c.apply(ctx, ns)
			if setupErr != nil {
				t.Fatal(setupErr)
			}
			if err == nil {
				t.Fatalf("accepted; want a refusal containing %q", c.expects)
			}
			t.Logf("refused: %v", err)
			for _, want := range c.expects {
				want = strings.ReplaceAll(want, "NS/", ns+"/")
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestGoodObjectsAreAcceptedAndDefaulted(t *testing.T) {
	cases := loadCorpus(t, "good")
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(ctx, t, c.name)
			err, setupErr := c.apply(ctx, ns)
			if setupErr != nil {
				t.Fatal(setupErr)
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			for _, e := range c.expects {
				checkExpectation(ctx, t, c, ns, e)
			}
		})
	}
}

func checkExpectation(ctx context.Context, t *testing.T, c corpusCase, ns, e string) {
	t.Helper()
	ref, assertion, ok := strings.Cut(e, " ")
	kind, name, ok2 := strings.Cut(ref, "/")
	path, want, ok3 := strings.Cut(assertion, "=")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("expectation %q is not KIND/NAME PATH=VALUE", e)
	}
	var proto *unstructured.Unstructured
	for _, d := range c.docs {
		if d.GetKind() == kind {
			proto = d
		}
	}
	if proto == nil {
		t.Fatalf("expectation %q names a kind the case does not create", e)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(proto.GroupVersionKind())
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("%s: %v", e, err)
	}
	got, found := lookup(obj.Object, strings.Split(path, "."))
	switch {
	case want == "*" && (!found || got == ""):
		t.Errorf("%s: %s is empty, want it set", ref, path)
	case want == "" && found && got != "":
		t.Errorf("%s: %s = %q, want it absent", ref, path, got)
	case want != "*" && want != "" && got != want:
		t.Errorf("%s: %s = %q, want %q", ref, path, got, want)
	}
}

func lookup(v any, path []string) (string, bool) {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return "", false
			}
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	return fmt.Sprint(v), true
}
