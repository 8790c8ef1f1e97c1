package localworld

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The flavor is applied only once the CRDs of its groups have been
// established for as long as kube-apiserver holds creates after that, by
// the same whole-second condition time the API server reads.
func TestWaitCreateWindow(t *testing.T) {
	env := sharedAPI.Env(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.window.winkube.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "window.winkube.dev", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
		},
	}
	if err := env.Client.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })
	var established time.Time
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = c.LastTransitionTime.Time
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the CRD was not established: %v", err)
	}

	if err := waitCreateWindow(ctx, env.Client, map[string]bool{"window.winkube.dev": true}); err != nil {
		t.Fatal(err)
	}
	if since := time.Since(established); since < createWindow {
		t.Fatalf("returned %v after the CRD was established (whole seconds), inside kube-apiserver's %v", since, createWindow)
	}
}

func ptrTrue() *bool { b := true; return &b }
