package tags

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// LastAppliedAnnotation records, on the object whose resources carry them,
// the additional tags winkube last applied, as JSON: a tag that leaves the
// spec is removed from Azure only when this record says winkube wrote it,
// so a tag someone else set (Azure Policy, a cost tool) is never removed.
// CAPZ keeps the same record (sigs.k8s.io/cluster-api-provider-azure-last-
// applied-tags-<kind>, azure/const.go, kubernetes-sigs/cluster-api-provider-
// azure 69ec3a40).
const LastAppliedAnnotation = "winkube.dev/last-applied-tags"

// Merge is the tags to send in a PUT of a resource that has have: have's,
// with want's over them. A PUT replaces a resource's tags, so sending only
// winkube's would remove every tag others set, and fail where a policy
// requires one (RequestDisallowedByPolicy).
func Merge(have, want map[string]*string) map[string]*string {
	out := make(map[string]*string, len(have)+len(want))
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// Service writes tags through the Tags API (Microsoft.Resources/tags at a
// resource's scope), which changes tags and nothing else of the resource,
// as CAPZ's tags service does (azure/services/tags/tags.go, 69ec3a40).
type Service struct {
	c *armresources.TagsClient
}

// NewService returns a Service.
func NewService(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armresources.NewTagsClient)
	if err != nil {
		return nil, err
	}
	return &Service{c: c}, nil
}

// Reconcile makes the tags of the resource at scope (an ARM ID) carry want,
// and removes those of lastApplied that want no longer has, when they
// still have the value winkube wrote. A resource that is missing, or that
// is not o's (its tags do not say so), is left alone: done is false then.
// winkube's own tags (winkube.dev_*) are never removed.
func (s *Service) Reconcile(ctx context.Context, o Owner, scope string, want map[string]*string, lastApplied map[string]string) (done bool, err error) {
	cur, err := s.c.GetAtScope(ctx, scope, nil)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading the tags of %s: %w", scope, err)
	}
	var have map[string]*string
	if cur.Properties != nil {
		have = cur.Properties.Tags
	}
	if !o.Owns(have) {
		return false, nil
	}
	merge, remove := Changes(have, want, lastApplied)
	if len(merge) > 0 {
		if _, err := s.c.UpdateAtScope(ctx, scope, armresources.TagsPatchResource{Operation: to.Ptr(armresources.TagsPatchOperationMerge),
			Properties: &armresources.Tags{Tags: merge}}, nil); err != nil {
			return false, fmt.Errorf("adding tags to %s: %w", scope, err)
		}
	}
	if len(remove) > 0 {
		// Delete with each tag's value: one someone changed since is theirs.
		if _, err := s.c.UpdateAtScope(ctx, scope, armresources.TagsPatchResource{Operation: to.Ptr(armresources.TagsPatchOperationDelete),
			Properties: &armresources.Tags{Tags: remove}}, nil); err != nil {
			return false, fmt.Errorf("removing tags from %s: %w", scope, err)
		}
	}
	return true, nil
}

// Changes are the tags to merge into have for it to carry want, and those
// to remove: lastApplied's that want dropped, still at the value winkube
// wrote, never winkube's own.
func Changes(have, want map[string]*string, lastApplied map[string]string) (merge, remove map[string]*string) {
	merge, remove = map[string]*string{}, map[string]*string{}
	for k, v := range want {
		if v == nil {
			continue
		}
		if h := have[k]; h == nil || *h != *v {
			merge[k] = v
		}
	}
	for k, v := range lastApplied {
		if _, kept := want[k]; kept || strings.HasPrefix(k, "winkube.dev_") {
			continue
		}
		if h := have[k]; h != nil && *h == v {
			remove[k] = to.Ptr(v)
		}
	}
	return merge, remove
}

func isNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}
