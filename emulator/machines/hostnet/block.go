package hostnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// Blocks is how many worlds can run on one machine at once.
const Blocks = 63

// Block is one local world's share of the loopback range: a /16 of public
// addresses (the emulator's public IPs) and a /16 of host addresses (its
// machines). Worlds running at once on one machine, in any process, hold
// different blocks, so their load balancers and machines never compete
// for an address. Block 0 is 127.1.0.0/16 and 127.2.0.0/16.
type Block struct {
	Index         int
	Public, Hosts netip.Prefix
	lock          *os.File
}

// ClaimBlock takes block index for this process until Release, or a free
// block when index is negative. The claim is a lock on a file in the
// machine's temporary folder: it ends when the process does. A new claim
// passes over the blocks held within the last recentlyHeld first: a world
// whose process was killed, or that was stopped, keeps its block in its
// state and takes it again when it starts, so a world starting meanwhile
// must not take its addresses from under it.
func ClaimBlock(index int) (*Block, error) {
	if index >= Blocks {
		return nil, fmt.Errorf("loopback block %d does not exist (0 to %d)", index, Blocks-1)
	}
	if index >= 0 {
		b, err := tryBlock(index)
		if err != nil {
			return nil, fmt.Errorf("loopback addresses %s and %s: %w", blockAt(index).Public, blockAt(index).Hosts, err)
		}
		return b, nil
	}
	for _, old := range []bool{false, true} {
		for i := range Blocks {
			if heldRecently(i) != old {
				continue
			}
			if b, err := tryBlock(i); err == nil {
				return b, nil
			}
		}
	}
	return nil, fmt.Errorf("all %d loopback blocks are taken by running winkube worlds", Blocks)
}

// recentlyHeld is how long a block's last claim keeps it from new worlds
// while others are free.
const recentlyHeld = 15 * time.Minute

func lockPath(i int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("winkube-loopback-%d.lock", i))
}

// heldRecently says whether block i was claimed within recentlyHeld: its
// lock file's time is its last claim's.
func heldRecently(i int) bool {
	st, err := os.Stat(lockPath(i))
	return err == nil && time.Since(st.ModTime()) < recentlyHeld
}

func blockAt(i int) Block {
	return Block{Index: i,
		Public: netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(1 + 2*i), 0, 0}), 16),
		Hosts:  netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(2 + 2*i), 0, 0}), 16)}
}

var errTaken = errors.New("in use by another running winkube world (winkube up, or a test): stop it first")

func tryBlock(i int) (*Block, error) {
	path := lockPath(i)
	// Read-only: another user's lock file can still be locked (or found
	// locked), since the addresses are the whole machine's.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, errTaken
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, errTaken
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	b := blockAt(i)
	b.lock = f
	return &b, nil
}

// Release gives the block back.
func (b *Block) Release() {
	if b != nil && b.lock != nil {
		_ = b.lock.Close()
		b.lock = nil
	}
}
