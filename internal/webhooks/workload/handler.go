package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/winkube/winkube/windowslimits"
)

// OptOutLabel on a namespace turns winkube's workload admission off there.
const OptOutLabel = "winkube.dev/admission"

// Paths the handlers are served on.
const (
	MutatePath   = "/mutate-workloads"
	ValidatePath = "/validate-workloads"
)

// Admission decides on workload objects.
type Admission struct {
	Resolver *Resolver
	// Reader reads namespaces (for the opt-out label).
	Reader client.Reader
	// FailClosed refuses pods whose images cannot be read; by default they
	// are admitted unchanged, with a warning.
	FailClosed bool
	// WindowsTaint adds a toleration for os=windows:NoSchedule to Windows pods.
	WindowsTaint bool

	decoder admission.Decoder
}

// New returns an Admission.
func New(r *Resolver, reader client.Reader) *Admission {
	return &Admission{Resolver: r, Reader: reader, decoder: admission.NewDecoder(clientgoscheme.Scheme)}
}

// podSpecOf finds the pod spec inside a workload object, and the metadata
// its pods get (where admission marks what it wrote).
func podSpecOf(obj runtime.Object) (*metav1.ObjectMeta, *corev1.PodSpec, *field.Path) {
	template := field.NewPath("spec", "template", "spec")
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec, field.NewPath("spec")
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, template
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, template
	case *appsv1.StatefulSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, template
	case *appsv1.ReplicaSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, template
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, template
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec, field.NewPath("spec", "jobTemplate", "spec", "template", "spec")
	}
	return nil, nil, nil
}

// metadataPath is where podSpecOf's pod metadata is in obj.
func metadataPath(obj runtime.Object) *field.Path {
	switch obj.(type) {
	case *corev1.Pod:
		return field.NewPath("metadata")
	case *batchv1.CronJob:
		return field.NewPath("spec", "jobTemplate", "spec", "template", "metadata")
	}
	return field.NewPath("spec", "template", "metadata")
}

// ownedByDeployment reports whether a ReplicaSet is a Deployment's: its
// template is the Deployment's, which admission placed already, and the
// Deployment controller finds its ReplicaSet by comparing the two templates
// (kubernetes v1.31 pkg/controller/deployment/util/deployment_util.go,
// FindNewReplicaSet and EqualIgnoreHash): placing it again could make them
// differ and the controller create ReplicaSets without end. Its pods are
// placed when they are created.
func ownedByDeployment(obj runtime.Object) bool {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return false
	}
	ref := metav1.GetControllerOf(rs)
	return ref != nil && ref.Kind == "Deployment"
}

func (a *Admission) decode(req admission.Request) (runtime.Object, error) {
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	obj, err := clientgoscheme.Scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := a.decoder.DecodeRaw(req.Object, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func (a *Admission) optedOut(ctx context.Context, namespace string) bool {
	if a.Reader == nil || namespace == "" {
		return false
	}
	ns := &corev1.Namespace{}
	if err := a.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false
	}
	return ns.Labels[OptOutLabel] == "disabled"
}

func invalid(req admission.Request, errs field.ErrorList) admission.Response {
	status := apierrors.NewInvalid(schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, req.Name, errs)
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status.ErrStatus}}
}

// workload decodes a create or update of a workload and finds its pod
// spec; done is the answer when there is nothing to decide (another
// operation, a kind without pods, an opted-out namespace, a bad object).
func (a *Admission) workload(ctx context.Context, req admission.Request) (obj runtime.Object, meta *metav1.ObjectMeta, spec *corev1.PodSpec, path *field.Path, done *admission.Response) {
	allowed := admission.Allowed("")
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, nil, nil, nil, &allowed
	}
	obj, err := a.decode(req)
	if err != nil {
		bad := admission.Errored(http.StatusBadRequest, err)
		return nil, nil, nil, nil, &bad
	}
	meta, spec, path = podSpecOf(obj)
	if spec == nil || a.optedOut(ctx, req.Namespace) {
		return nil, nil, nil, nil, &allowed
	}
	return obj, meta, spec, path, nil
}

// Mutate places workloads by their images.
func (a *Admission) Mutate() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		obj, meta, spec, path, done := a.workload(ctx, req)
		if done != nil {
			return *done
		}
		// An update of a running pod cannot change its placement.
		if _, isPod := obj.(*corev1.Pod); isPod && req.Operation == admissionv1.Update || ownedByDeployment(obj) {
			return admission.Allowed("")
		}
		pl, ferr := Place(ctx, a.Resolver, spec, path)
		if ferr != nil {
			return invalid(req, field.ErrorList{ferr})
		}
		var warnings []string
		if len(pl.Unresolved) > 0 {
			if a.FailClosed {
				return invalid(req, field.ErrorList{field.InternalError(path.Child("containers"),
					fmt.Errorf("cannot read the images' platforms, and the policy is to refuse then: %s", strings.Join(pl.Unresolved, "; ")))})
			}
			warnings = append(warnings, "winkube could not read the platforms of some images, placement left as it was: "+strings.Join(pl.Unresolved, "; "))
			if pl.OS != "" && len(pl.Unresolved) > 0 {
				// A partial view must not pin the pod.
				pl = Placement{Unresolved: pl.Unresolved}
			}
		}
		changed, ferr := Apply(pl, meta, spec, path, a.WindowsTaint)
		if ferr != nil {
			return invalid(req, field.ErrorList{ferr})
		}
		if !changed {
			return admission.Allowed("").WithWarnings(warnings...)
		}
		out, err := json.Marshal(obj)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		return admission.PatchResponseFromRaw(req.Object.Raw, out).WithWarnings(warnings...)
	})
}

// Validate refuses Windows workloads that ask for what Windows cannot do.
func (a *Admission) Validate() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		obj, meta, spec, path, done := a.workload(ctx, req)
		if done != nil {
			return *done
		}
		errs, warnings := ValidateWindowsTarget(windowslimits.Target{Labels: meta.Labels, Spec: spec, Meta: metadataPath(obj), Path: path})
		if len(errs) > 0 {
			return invalid(req, errs)
		}
		return admission.Allowed("").WithWarnings(warnings...)
	})
}
