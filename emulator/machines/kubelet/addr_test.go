package kubelet

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/winkube/winkube/emulator/machines/hostnet"
)

var testAddrs struct {
	once  sync.Once
	block *hostnet.Block
	err   error
	mu    sync.Mutex
	next  netip.Addr
}

// testAddress hands each test a loopback address of this process's own
// block, so that tests of other packages running at once never compete
// for a port.
func testAddress(t *testing.T) netip.Addr {
	t.Helper()
	testAddrs.once.Do(func() {
		testAddrs.block, testAddrs.err = hostnet.ClaimBlock(-1)
		if testAddrs.err == nil {
			testAddrs.next = testAddrs.block.Hosts.Addr().Next()
		}
	})
	if testAddrs.err != nil {
		t.Fatal(testAddrs.err)
	}
	testAddrs.mu.Lock()
	defer testAddrs.mu.Unlock()
	a := testAddrs.next
	testAddrs.next = a.Next()
	return a
}
