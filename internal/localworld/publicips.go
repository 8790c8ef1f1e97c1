package localworld

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// publicIPStart is where a new world's public IPs (its API server's load
// balancer first) start in its block's public /16: the first address of a
// /24 picked at random among those no kubectl discovery cache of this user
// names. kubectl keeps a server's discovery for six hours in a directory
// named after its host and port (kubernetes/cli-runtime
// pkg/genericclioptions/config_flags.go at d94f1d2a, ToDiscoveryClient and
// computeDiscoverCacheDir: $KUBECACHEDIR or ~/.kube/cache, then
// discovery/<host>_<port>); a world that came up at an address with such
// a cache would be seen, for those hours, with an earlier world's groups
// and versions. When every /24 has one, any is taken.
func publicIPStart(pool netip.Prefix) netip.Addr {
	base := pool.Masked().Addr().As4()
	if !pool.Addr().Is4() || pool.Bits() != 16 {
		return netip.Addr{} // the pool's first, as the emulator does
	}
	cached := map[byte]bool{}
	for _, e := range kubectlDiscoveryCache() {
		host, _, _ := strings.Cut(e, "_")
		if a, err := netip.ParseAddr(host); err == nil && pool.Contains(a) {
			cached[a.As4()[2]] = true
		}
	}
	var free []byte
	for i := range 256 {
		if !cached[byte(i)] {
			free = append(free, byte(i))
		}
	}
	third := byte(rand.IntN(256))
	if len(free) > 0 {
		third = free[rand.IntN(len(free))]
	}
	return netip.AddrFrom4([4]byte{base[0], base[1], third, 1})
}

// kubectlDiscoveryCache are the names of kubectl's discovery cache
// entries, <host>_<port>.
func kubectlDiscoveryCache() []string {
	dir := os.Getenv("KUBECACHEDIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		dir = filepath.Join(home, ".kube", "cache")
	}
	entries, err := os.ReadDir(filepath.Join(dir, "discovery"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
