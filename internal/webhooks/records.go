package webhooks

import (
	"context"
	"fmt"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Records guards the annotations in which the controllers keep what an
// object created in Azure and the operations it has under way
// (infrav1.CreatedResourcesAnnotation, infrav1.OperationsAnnotation).
//
// The rule: on an existing object, only the manager changes them; a change
// by anyone else is refused. On create they are accepted from anyone,
// because clusterctl move creates the objects in the target cluster with
// their annotations (and without their status), signed by nothing the
// manager could check. What a creator wrote is harmless: the controllers
// prove each recorded resource in Azure (its owner tags, naming the
// cluster's namespace, or its parent's) before deleting it, and resume an
// operation only when its token polls the cluster's ARM endpoint.
//
// The manager is the user whose requests the webhook server's own client
// makes (its ServiceAccount in a management cluster, the local world's
// user in `winkube up`), asked of the API server once with a
// SelfSubjectReview; Manager, when set, names it instead.
type Records struct {
	// Manager is the manager's username; empty asks the API server who
	// Config is.
	Manager string
	Config  *rest.Config

	mu sync.Mutex
}

func (g *Records) manager(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Manager != "" {
		return g.Manager, nil
	}
	if g.Config == nil {
		return "", fmt.Errorf("the webhook does not know the manager's identity")
	}
	cs, err := kubernetes.NewForConfig(g.Config)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who the manager is: %w", err)
	}
	g.Manager = r.Status.UserInfo.Username
	return g.Manager, nil
}

// check refuses a change of the records on update by anyone but the
// manager.
func (g *Records) check(ctx context.Context, oldObj, obj client.Object) field.ErrorList {
	var changed []string
	_, leaving := obj.GetAnnotations()[clusterctlv1.DeleteForMoveAnnotation]
	for _, k := range []string{infrav1.CreatedResourcesAnnotation, infrav1.OperationsAnnotation} {
		v, kept := obj.GetAnnotations()[k]
		if oldObj.GetAnnotations()[k] == v {
			continue
		}
		// clusterctl move marks each source object for deletion with a
		// JSON patch that replaces the whole annotations map
		// (cmd/clusterctl/client/cluster/mover.go,
		// addDeleteForMoveAnnotationPatch, cluster-api v1.14.2), which
		// drops the records on the source copy just before it is deleted
		// without its finalizers. Dropping them there only makes this copy
		// forget (its status still has them); adding or changing records
		// is never allowed.
		if leaving && !kept {
			continue
		}
		changed = append(changed, k)
	}
	if len(changed) == 0 {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	user := req.UserInfo.Username
	var manager string
	if err == nil && g != nil {
		manager, err = g.manager(ctx)
	}
	if err == nil && manager != "" && user == manager {
		return nil
	}
	why := "only winkube's manager changes them on an existing object (they name the Azure resources it deletes with the object, and the operations it resumes)"
	if err != nil {
		why += fmt.Sprintf("; the webhook could not tell who the manager is: %v", err)
	}
	var errs field.ErrorList
	for _, k := range changed {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(k), why))
	}
	return errs
}
