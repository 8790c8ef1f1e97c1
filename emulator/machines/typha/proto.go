package typha

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultPort is Typha's port (syncproto.DefaultPort, typha/pkg/syncproto/sync_proto.go,
// calico v3.30.7).
const DefaultPort = 5473

// MaxMessageKVs is how many updates one KVs message carries at most
// (ServerMaxMessageSize 100, typha/pkg/config/config_params.go, calico v3.30.7).
const MaxMessageKVs = 100

// maxFrame bounds what a reader accepts from the other side of a plain TCP port.
const maxFrame = 16 << 20

// Message kinds: the subset of sync_proto.go's messages that Felix and Typha exchange
// without compression (ClientHello, ServerHello, KVs, SyncStatus, Ping, Pong).
const (
	msgHello byte = iota + 1
	msgServerHello
	msgKVs
	msgStatus
	msgPing
	msgPong
)

// Hello is the client's first message (MsgClientHello).
type Hello struct {
	Hostname   string
	SyncerType SyncerType
	Info       string
}

// A frame is a 4-byte big-endian length, a kind byte and the kind's fields. Strings are
// a uvarint length and bytes. Frames are self-contained so that one encoding of a
// breadcrumb can be written to every connection.
type frameWriter struct{ b []byte }

func (w *frameWriter) begin(kind byte) int {
	at := len(w.b)
	w.b = append(w.b, 0, 0, 0, 0, kind)
	return at
}

func (w *frameWriter) end(at int) {
	binary.BigEndian.PutUint32(w.b[at:], uint32(len(w.b)-at-4))
}

func (w *frameWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *frameWriter) hello(h Hello) {
	at := w.begin(msgHello)
	w.str(h.Hostname)
	w.str(string(h.SyncerType))
	w.str(h.Info)
	w.end(at)
}

func (w *frameWriter) serverHello(st SyncerType) {
	at := w.begin(msgServerHello)
	w.str(string(st))
	w.end(at)
}

func (w *frameWriter) status(s SyncStatus) {
	at := w.begin(msgStatus)
	w.b = append(w.b, byte(s))
	w.end(at)
}

func (w *frameWriter) ping(kind byte, nanos int64) {
	at := w.begin(kind)
	w.b = binary.AppendVarint(w.b, nanos)
	w.end(at)
}

// kvs writes us as KVs frames of at most MaxMessageKVs updates each.
func (w *frameWriter) kvs(us []Update) {
	for len(us) > 0 {
		n := min(len(us), MaxMessageKVs)
		at := w.begin(msgKVs)
		w.b = binary.AppendUvarint(w.b, uint64(n))
		for _, u := range us[:n] {
			w.str(u.Kind)
			w.str(u.Key)
			w.str(u.Revision)
			del := byte(0)
			if u.Deleted {
				del = 1
			}
			w.b = append(w.b, del)
		}
		w.end(at)
		us = us[n:]
	}
}

// frameReader reads frames; skip drops a frame's remaining bytes unread.
type frameReader struct {
	r    *bufio.Reader
	left int // bytes of the current frame not yet consumed
}

func newFrameReader(r io.Reader) *frameReader { return &frameReader{r: bufio.NewReaderSize(r, 64<<10)} }

var errFrame = errors.New("typha: malformed frame")

// next discards what is left of the previous frame and returns the next frame's kind.
func (f *frameReader) next() (byte, error) {
	if err := f.skip(); err != nil {
		return 0, err
	}
	var hdr [5]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < 1 || n > maxFrame {
		return 0, fmt.Errorf("%w: length %d", errFrame, n)
	}
	f.left = n - 1
	return hdr[4], nil
}

func (f *frameReader) skip() error {
	if f.left == 0 {
		return nil
	}
	_, err := f.r.Discard(f.left)
	f.left = 0
	return err
}

func (f *frameReader) ReadByte() (byte, error) {
	if f.left < 1 {
		return 0, errFrame
	}
	f.left--
	return f.r.ReadByte()
}

func (f *frameReader) uvarint() (uint64, error) { return binary.ReadUvarint(f) }

func (f *frameReader) varint() (int64, error) { return binary.ReadVarint(f) }

func (f *frameReader) str() (string, error) {
	n, err := f.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(f.left) {
		return "", errFrame
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f.r, b); err != nil {
		return "", err
	}
	f.left -= int(n)
	return string(b), nil
}

func (f *frameReader) hello() (Hello, error) {
	var h Hello
	var st string
	var err error
	if h.Hostname, err = f.str(); err != nil {
		return h, err
	}
	if st, err = f.str(); err != nil {
		return h, err
	}
	h.SyncerType = SyncerType(st)
	h.Info, err = f.str()
	return h, err
}

// kvCount reads a KVs frame's count and leaves its updates unread (to skip or decode).
func (f *frameReader) kvCount() (int, error) {
	n, err := f.uvarint()
	if err != nil || n > MaxMessageKVs {
		return 0, errors.Join(errFrame, err)
	}
	return int(n), nil
}

func (f *frameReader) update() (Update, error) {
	var u Update
	var err error
	if u.Kind, err = f.str(); err != nil {
		return u, err
	}
	if u.Key, err = f.str(); err != nil {
		return u, err
	}
	if u.Revision, err = f.str(); err != nil {
		return u, err
	}
	del, err := f.ReadByte()
	u.Deleted = del == 1
	return u, err
}
