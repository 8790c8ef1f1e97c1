package typha

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
)

// message is a decoded frame: either updates or a status.
type message struct {
	KVs    []Update
	Status *SyncStatus
}

func decode(t *testing.T, b []byte) []message {
	t.Helper()
	r := newFrameReader(bytes.NewReader(b))
	var out []message
	for {
		kind, err := r.next()
		if err != nil {
			return out
		}
		switch kind {
		case msgKVs:
			n, err := r.kvCount()
			if err != nil {
				t.Fatal(err)
			}
			m := message{KVs: []Update{}}
			for range n {
				u, err := r.update()
				if err != nil {
					t.Fatal(err)
				}
				m.KVs = append(m.KVs, u)
			}
			out = append(out, m)
		case msgStatus:
			b, err := r.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			s := SyncStatus(b)
			out = append(out, message{Status: &s})
		default:
			t.Fatalf("unexpected frame kind %d", kind)
		}
	}
}

func flatten(ms []message) (us []Update, statuses []SyncStatus) {
	for _, m := range ms {
		us = append(us, m.KVs...)
		if m.Status != nil {
			statuses = append(statuses, *m.Status)
		}
	}
	return us, statuses
}

func pod(name, rev string) Update { return Update{Kind: "pods", Key: "default/" + name, Revision: rev} }

func TestCacheSnapshotThenDeltas(t *testing.T) {
	c := NewCache(newFakeClock())
	c.Apply(pod("b", "2"), pod("a", "1"))
	crumb, snap := c.Join()

	us, st := flatten(decode(t, snap))
	if want := []Update{pod("a", "1"), pod("b", "2")}; !reflect.DeepEqual(us, want) {
		t.Fatalf("snapshot = %v, want %v", us, want)
	}
	if !reflect.DeepEqual(st, []SyncStatus{WaitForDatastore}) {
		t.Fatalf("snapshot ends with status %v, want [wait-for-datastore]", st)
	}

	c.Apply(pod("c", "3"))
	c.SetStatus(InSync)
	var got []Update
	var statuses []SyncStatus
	for range 2 {
		next, err := crumb.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		crumb = next
		us, st := flatten(decode(t, crumb.Frames()))
		got, statuses = append(got, us...), append(statuses, st...)
	}
	if want := []Update{pod("c", "3")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deltas = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(statuses, []SyncStatus{InSync}) {
		t.Fatalf("statuses after the snapshot = %v, want [in-sync]", statuses)
	}
}

func TestCacheLateJoinerGetsCurrentState(t *testing.T) {
	c := NewCache(newFakeClock())
	c.Apply(pod("a", "1"), pod("b", "2"))
	c.Apply(pod("a", "5"))
	c.Apply(Update{Kind: "pods", Key: "default/b", Revision: "6", Deleted: true})
	c.SetStatus(InSync)

	_, snap := c.Join()
	us, st := flatten(decode(t, snap))
	if want := []Update{pod("a", "5")}; !reflect.DeepEqual(us, want) {
		t.Fatalf("late joiner's snapshot = %v, want %v (b deleted, a at its last revision)", us, want)
	}
	if !reflect.DeepEqual(st, []SyncStatus{InSync}) {
		t.Fatalf("late joiner's status = %v, want [in-sync]", st)
	}
	if n := c.Count("pods"); n != 1 {
		t.Fatalf("Count(pods) = %d, want 1", n)
	}
}

func TestCacheEncodesOncePerCrumb(t *testing.T) {
	c := NewCache(newFakeClock())
	us := make([]Update, 250)
	for i := range us {
		us[i] = pod(fmt.Sprint(i), "1")
	}
	c.Apply(us...)
	_, s1 := c.Join()
	_, s2 := c.Join()
	if &s1[0] != &s2[0] {
		t.Fatal("two clients joining at one crumb got separately encoded snapshots")
	}
	ms := decode(t, s1)
	if len(ms) != 4 || len(ms[0].KVs) != 100 || len(ms[2].KVs) != 50 {
		t.Fatalf("snapshot messages: %d, want 3 of at most 100 updates and a status", len(ms))
	}
	crumb := c.Current()
	if f1, f2 := crumb.Frames(), crumb.Frames(); &f1[0] != &f2[0] {
		t.Fatal("a crumb's deltas were encoded twice")
	}
}
