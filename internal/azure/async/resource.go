package async

import (
	"context"
	"errors"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/winkube/winkube/internal/azure/tags"
)

// Ref names one resource: its group, its parent (a subnet's VNet, a NAT
// rule's load balancer) when it is a child, and its name.
type Ref struct {
	ResourceGroup, Parent, Name string
}

// Spec is one resource as a cluster wants it, in the shape CAPZ's service
// layer has (its ResourceSpecGetter): the body of the PUT is built from
// what Azure holds, so what others wrote into the resource (the cloud
// provider's NSG rules, routes, a user's subnets) is kept.
type Spec[R any] interface {
	ResourceRef() Ref
	// OwnerTags are the tags that make an existing resource the cluster's;
	// an existing resource without them is refused (*tags.NotOwnedError)
	// and never written. Nil when the caller decides ownership itself.
	OwnerTags() map[string]*string
	// Parameters is the PUT body given the resource as Azure holds it (nil
	// when it does not exist), or nil when Azure already has what the spec
	// wants.
	Parameters(existing *R) (*R, error)
}

// ErrNotYet is a Parameters answer: the resource is on its way (being
// made by an operation no longer tracked, say), so there is nothing to
// send, and Reconcile reports it not done.
var ErrNotYet = errors.New("the resource is not ready yet")

// Poller is a started or resumed long-running operation.
type Poller interface {
	Done() bool
	Poll(context.Context) (*http.Response, error)
	ResumeToken() (string, error)
	// Finish is the operation's outcome once Done: nil, or why it failed.
	Finish(context.Context) error
}

// Wrap makes an SDK poller a Poller.
func Wrap[T any](p *runtime.Poller[T], err error) (Poller, error) {
	if err != nil {
		return nil, err
	}
	return sdkPoller[T]{p}, nil
}

type sdkPoller[T any] struct{ *runtime.Poller[T] }

func (p sdkPoller[T]) Finish(ctx context.Context) error {
	_, err := p.Result(ctx)
	return err
}

// WrapResult is Wrap for a PUT whose final response carries the resource
// (as an ARM PUT's does, whether answered at once or after its operation):
// the resource is kept as the poller finishes, so that ReconcileFrom hands
// it back rather than reading it again. CAPZ's async service likewise
// returns the operation's result (azure/services/async/async.go
// processOngoingOperation and CreateResource @0da94738).
// It is called with the resource's getter, then with what Begin returns:
// WrapResult(getter)(client.BeginCreateOrUpdate(...)).
func WrapResult[T, R any](resource func(T) R) func(*runtime.Poller[T], error) (Poller, error) {
	return func(p *runtime.Poller[T], err error) (Poller, error) {
		if err != nil {
			return nil, err
		}
		return &resultPoller[T, R]{Poller: p, resource: resource}, nil
	}
}

type resultPoller[T, R any] struct {
	*runtime.Poller[T]
	resource func(T) R
	final    *R
}

func (p *resultPoller[T, R]) Finish(ctx context.Context) error {
	res, err := p.Result(ctx)
	if err == nil {
		r := p.resource(res)
		p.final = &r
	}
	return err
}

// finalResource is a finished Poller that kept its resource.
type finalResource[R any] interface {
	finalResource() *R
}

func (p *resultPoller[T, R]) finalResource() *R { return p.final }

// Kind is what the generic reconciler needs of one resource type's SDK
// client. Put and Delete resume the operation of a non-empty token.
type Kind[R any] struct {
	// Noun names the type in errors: "NAT gateway".
	Noun   string
	Get    func(ctx context.Context, ref Ref) (*R, error)
	Put    func(ctx context.Context, ref Ref, body R, token string) (Poller, error)
	Delete func(ctx context.Context, ref Ref, token string) (Poller, error)
	// ETag and Tags read a resource's; nil when the type has none.
	ETag func(*R) *string
	Tags func(*R) map[string]*string
}

// Read returns the resource, or nil when it does not exist.
func (k *Kind[R]) Read(ctx context.Context, ref Ref) (*R, error) {
	r, err := k.Get(ctx, ref)
	if err != nil {
		return nil, IgnoreNotFound(err)
	}
	return r, nil
}

// Reconcile makes the resource what spec says without blocking. With a
// token it resumes the operation under way; otherwise it reads the
// resource, refuses it when it is not the cluster's, and asks the spec for
// the PUT body. The PUT carries the ETag read (If-Match), so that what
// someone else wrote between the read and the write is not overwritten:
// Azure answers 412, and the next reconcile reads again. A spec that is
// an ExclusiveCreate creates with If-None-Match: *, so that a resource
// made meanwhile by someone else is not taken over.
func Reconcile[R any](ctx context.Context, k *Kind[R], spec Spec[R], token string) (next string, done bool, err error) {
	next, done, _, err = ReconcileFrom(ctx, k, spec, token, nil)
	return next, done, err
}

// ReconcileFrom is Reconcile starting from the resource as the caller
// just read it (known; nil to read it here), and returning it when done
// (cur): as read when it needed no write, or as the PUT's final response
// carried it when its Put poller keeps it (WrapResult); nil while under
// way. A reconcile that reads a resource for its own checks and then for
// what it holds (a NIC's address, a VM's ID) asks ARM once. CAPZ's async
// service likewise hands back the resource it read when its parameters
// are nil (azure/services/async/async.go CreateResource @0da94738).
func ReconcileFrom[R any](ctx context.Context, k *Kind[R], spec Spec[R], token string, known *R) (next string, done bool, cur *R, err error) {
	if token == "" && known == nil {
		if known, err = k.Read(ctx, spec.ResourceRef()); err != nil {
			return "", false, nil, err
		}
	}
	return ReconcileRead(ctx, k, spec, token, known)
}

// ReconcileRead is ReconcileFrom for a caller that has read the resource
// (existing, nil when Azure has none) or holds a token, and so reads
// nothing more before it writes.
func ReconcileRead[R any](ctx context.Context, k *Kind[R], spec Spec[R], token string, existing *R) (next string, done bool, cur *R, err error) {
	ref := spec.ResourceRef()
	var body *R
	// The PUT's preconditions: the ETag read, or none may exist.
	var etag *string
	exclusive := false
	if token == "" {
		if existing != nil && spec.OwnerTags() != nil && k.Tags != nil {
			if err := tags.CheckOwned(k.Noun, ref.Name, spec.OwnerTags(), k.Tags(existing), tags.AdoptsUnscoped(ctx)); err != nil {
				return "", false, nil, err
			}
		}
		if body, err = spec.Parameters(existing); errors.Is(err, ErrNotYet) {
			return "", false, nil, nil
		} else if err != nil {
			return "", false, nil, err
		}
		if body == nil {
			return "", true, existing, nil
		}
		switch {
		case existing != nil && k.ETag != nil:
			etag = k.ETag(existing)
		case existing == nil && isExclusive(spec):
			exclusive = true
		}
	}
	var p Poller
	next, done, err = Step(ctx, token, func(ctx context.Context, tok string) (Poller, error) {
		var b R
		if body != nil {
			b = *body
		}
		ctx = IfMatch(ctx, etag)
		if exclusive {
			ctx = policy.WithHTTPHeader(ctx, http.Header{"If-None-Match": []string{"*"}})
		}
		var err error
		p, err = k.Put(ctx, ref, b, tok)
		return p, err
	})
	if f, ok := p.(finalResource[R]); ok && done && err == nil {
		cur = f.finalResource()
	}
	return next, done, cur, err
}

// Remove deletes the resource without blocking; one already gone is done.
func Remove[R any](ctx context.Context, k *Kind[R], ref Ref, token string) (next string, done bool, err error) {
	next, done, err = Step(ctx, token, func(ctx context.Context, tok string) (Poller, error) { return k.Delete(ctx, ref, tok) })
	if err != nil && IsNotFound(err) {
		return "", true, nil
	}
	return next, done, err
}

// ExclusiveCreate is a Spec whose resource, when missing, must be made by
// this PUT and by no one else (what the caller then records as its own).
type ExclusiveCreate interface {
	ExclusiveCreate() bool
}

func isExclusive(spec any) bool {
	e, ok := spec.(ExclusiveCreate)
	return ok && e.ExclusiveCreate()
}

// Sync is the Poller of an operation its resource provider completes
// within the request (an availability set's PUT and DELETE): done at once,
// failed with err.
func Sync(err error) (Poller, error) {
	if err != nil {
		return nil, err
	}
	return finished{}, nil
}

type finished struct{}

func (finished) Done() bool                                   { return true }
func (finished) Poll(context.Context) (*http.Response, error) { return nil, nil }
func (finished) ResumeToken() (string, error)                 { return "", nil }
func (finished) Finish(context.Context) error                 { return nil }
