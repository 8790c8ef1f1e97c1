package securitygroups_test

import (
	"context"

	"github.com/winkube/winkube/internal/azure/async"
)

func ctxIfMatch(ctx context.Context, etag *string) context.Context { return async.IfMatch(ctx, etag) }
