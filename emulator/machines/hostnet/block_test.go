package hostnet

import (
	"strings"
	"testing"
)

func TestBlocksAreExclusive(t *testing.T) {
	a, err := ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if a.Public.Bits() != 16 || a.Hosts.Bits() != 16 || a.Hosts.Addr().As4()[1] != a.Public.Addr().As4()[1]+1 || !a.Public.Addr().IsLoopback() {
		t.Fatalf("block %d: public %s, hosts %s", a.Index, a.Public, a.Hosts)
	}
	if _, err := ClaimBlock(a.Index); err == nil || !strings.Contains(err.Error(), "in use by another running winkube world") {
		t.Fatalf("claiming a held block: %v", err)
	}
	b, err := ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Index == a.Index || b.Public.Overlaps(a.Public) || b.Hosts.Overlaps(a.Hosts) || b.Public.Overlaps(a.Hosts) {
		t.Fatalf("two blocks overlap: %+v and %+v", a, b)
	}
	held := b.Index
	b.Release()
	again, err := ClaimBlock(held)
	if err != nil {
		t.Fatalf("a released block is free again: %v", err)
	}
	again.Release()
	if blockAt(0).Public.String() != "127.1.0.0/16" || blockAt(0).Hosts.String() != "127.2.0.0/16" || blockAt(Blocks-1).Hosts.String() != "127.126.0.0/16" {
		t.Fatalf("block layout: %v %v", blockAt(0), blockAt(Blocks-1))
	}
	if _, err := ClaimBlock(Blocks); err == nil {
		t.Fatal("a block past the range")
	}
}

// A block given back, as a killed world's is, stays its world's while
// other blocks are free: a new claim passes over it, and the world that
// held it takes it again by its index.
func TestReleasedBlockIsLeftToItsWorld(t *testing.T) {
	a, err := ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	held := a.Index
	a.Release()
	b, err := ClaimBlock(-1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Index == held {
		t.Fatalf("a new claim took block %d, released a moment ago, while others were free", held)
	}
	again, err := ClaimBlock(held)
	if err != nil {
		t.Fatalf("the released block's world takes it again: %v", err)
	}
	again.Release()
}
