package webhooks

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Problem is one field an object of a set would be refused for.
type Problem struct {
	Kind, Name string
	// Field is the field's path, such as spec.location.
	Field  string
	Type   field.ErrorType
	Value  any
	Detail string
}

func (p Problem) String() string {
	if p.Type == field.ErrorTypeRequired || p.Value == nil {
		return fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Name, p.Field, p.Detail)
	}
	return fmt.Sprintf("%s %s: %s %v: %s", p.Kind, p.Name, p.Field, p.Value, p.Detail)
}

// SetError is what Admit returns when objects of the set would be refused.
type SetError struct{ Problems []Problem }

func (e *SetError) Error() string {
	msg := "the objects would be refused:"
	for _, p := range e.Problems {
		msg += "\n  " + p.String()
	}
	return msg
}

// Admit defaults and validates a set of objects that are about to be
// created together, as the API server would with winkube's webhooks, before
// anything is written: commands that build objects (generate, up) refuse
// what the management cluster would refuse, with the same messages. The
// objects' cross-checks (name conflicts, the Cluster's ranges against the
// VNet) read the set itself, where the webhooks read the API server.
// The objects themselves are left as they are: defaulting works on copies,
// so what is written is what the user would apply.
func Admit(ctx context.Context, s *runtime.Scheme, in []client.Object) error {
	objs := make([]client.Object, len(in))
	for i, o := range in {
		objs[i] = o.DeepCopyObject().(client.Object)
	}
	r := &objectSet{scheme: s, objs: objs}
	var problems []Problem
	add := func(obj client.Object, err error) {
		if err == nil {
			return
		}
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Details != nil {
			for _, c := range status.Status().Details.Causes {
				problems = append(problems, Problem{Kind: kindOf(obj), Name: obj.GetName(), Field: c.Field, Type: field.ErrorType(c.Type), Detail: c.Message})
			}
			if len(status.Status().Details.Causes) > 0 {
				return
			}
		}
		problems = append(problems, Problem{Kind: kindOf(obj), Name: obj.GetName(), Detail: err.Error()})
	}
	for _, obj := range objs {
		for _, msg := range validation.IsDNS1123Subdomain(obj.GetName()) {
			problems = append(problems, Problem{Kind: kindOf(obj), Name: obj.GetName(), Field: "metadata.name", Type: field.ErrorTypeInvalid, Value: obj.GetName(), Detail: msg})
		}
	}
	if len(problems) > 0 {
		return &SetError{Problems: problems}
	}
	// Defaulting first, for every object, as the API server's mutating
	// phase runs before any validation of another object reads it.
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *infrav1.AzureCluster:
			err = (&AzureCluster{Reader: r}).Default(ctx, o)
		case *infrav1.AzureMachine:
			err = (&AzureMachine{Reader: r}).Default(ctx, o)
		case *infrav1.AzureMachineTemplate:
			err = AzureMachineTemplate{}.Default(ctx, o)
		case *infrav1.AzureMachinePool:
			err = (&AzureMachinePool{Reader: r}).Default(ctx, o)
		}
		add(obj, err)
	}
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *infrav1.AzureCluster:
			_, err = (&AzureCluster{Reader: r}).ValidateCreate(ctx, o)
		case *infrav1.AzureClusterTemplate:
			_, err = AzureClusterTemplate{}.ValidateCreate(ctx, o)
		case *infrav1.AzureMachine:
			_, err = (&AzureMachine{Reader: r}).ValidateCreate(ctx, o)
		case *infrav1.AzureMachineTemplate:
			_, err = AzureMachineTemplate{}.ValidateCreate(ctx, o)
		case *infrav1.AzureMachinePool:
			_, err = (&AzureMachinePool{Reader: r}).ValidateCreate(ctx, o)
		case *clusterv1.Cluster:
			_, err = (&Cluster{Reader: r}).ValidateCreate(ctx, o)
		}
		add(obj, err)
	}
	if len(problems) > 0 {
		return &SetError{Problems: problems}
	}
	return nil
}

// objectSet answers Get and List from a set of objects, for the webhooks'
// cross-checks when the objects are not in an API server yet.
type objectSet struct {
	scheme *runtime.Scheme
	objs   []client.Object
}

func (r *objectSet) gvk(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, r.scheme)
}

func (r *objectSet) Get(_ context.Context, key client.ObjectKey, into client.Object, _ ...client.GetOption) error {
	want, err := r.gvk(into)
	if err != nil {
		return err
	}
	for _, o := range r.objs {
		if got, err := r.gvk(o); err != nil || got != want || client.ObjectKeyFromObject(o) != key {
			continue
		}
		return copyInto(o, into)
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: want.Group, Resource: want.Kind}, key.Name)
}

func (r *objectSet) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	listGVK, err := r.gvk(list)
	if err != nil {
		return err
	}
	itemKind := listGVK.GroupVersion().WithKind(trimList(listGVK.Kind))
	var items []runtime.Object
	for _, o := range r.objs {
		if got, err := r.gvk(o); err != nil || got != itemKind {
			continue
		}
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		items = append(items, o.DeepCopyObject())
	}
	return meta.SetList(list, items)
}

func trimList(kind string) string { return kind[:len(kind)-len("List")] }

// copyInto copies src into dst, two pointers to the same type.
func copyInto(src, dst client.Object) error {
	sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
	if sv.Type() != dv.Type() {
		return fmt.Errorf("objectSet: %T is not a %T", src, dst)
	}
	dv.Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
	return nil
}
