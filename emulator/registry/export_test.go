package registry

import "net"

// SetUnpackLimit sets what unpacking a gzipped archive may write, and
// returns a function that restores it.
func SetUnpackLimit(ratio, slack int64) (restore func()) {
	r, s := unpackRatio, unpackSlack
	unpackRatio, unpackSlack = ratio, slack
	return func() { unpackRatio, unpackSlack = r, s }
}

// OnListenUnix has fn see each Unix socket path ServePush binds, before
// the bind; it returns a function that restores the plain bind.
func OnListenUnix(fn func(path string)) (restore func()) {
	old := listenUnix
	listenUnix = func(p string) (net.Listener, error) {
		fn(p)
		return old(p)
	}
	return func() { listenUnix = old }
}
