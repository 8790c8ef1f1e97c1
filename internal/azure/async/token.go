package async

import (
	"encoding/json"
	"net/url"
	"strings"
)

// TokenOnEndpoint reports whether a resume token polls only the ARM
// endpoint arm (same scheme, host and port). A token is read back from an
// object's records, which whoever creates the object writes (clusterctl
// move carries them in annotations); the SDK would poll any URL a token
// names, with a bearer token for ARM. A token that is not the SDK's JSON,
// or names any other host, is not to be resumed: the caller drops it and
// starts (or looks up) the operation again, which ARM's idempotent PUTs
// and DELETEs make safe.
func TokenOnEndpoint(token, arm string) bool {
	want, err := url.Parse(arm)
	if err != nil || want.Host == "" {
		return false
	}
	var v any
	if json.Unmarshal([]byte(token), &v) != nil {
		return false
	}
	if _, ok := v.(map[string]any); !ok {
		return false
	}
	return urlsOn(v, "", want)
}

// urlsOn checks every string of a decoded token that is, or is named as,
// a URL (the SDK's pollers keep asyncURL, locURL, origURL, pollURL,
// oplocURL, ...).
func urlsOn(v any, key string, want *url.URL) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !urlsOn(e, k, want) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !urlsOn(e, key, want) {
				return false
			}
		}
	case string:
		if x == "" || !(strings.HasSuffix(strings.ToLower(key), "url") || strings.Contains(x, "://") || strings.HasPrefix(x, "//")) {
			return true
		}
		u, err := url.Parse(x)
		return err == nil && strings.EqualFold(u.Scheme, want.Scheme) && strings.EqualFold(u.Host, want.Host) && u.User == nil
	}
	return true
}
