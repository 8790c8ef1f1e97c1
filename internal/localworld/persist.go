package localworld

import (
	"time"

	"github.com/go-logr/logr"
)

// saveDelay is how long a change waits before it is written: changes in
// that time share one write, so a thousand machines booting cost a few
// writes a second, and a winkube killed with SIGKILL loses at most the
// changes of its last saveDelay.
const saveDelay = 500 * time.Millisecond

// writeBehind keeps one file of the world's state up to date as it
// changes, so that a killed winkube leaves a state the next one resumes.
// save writes the whole file atomically (by rename).
type writeBehind struct {
	what  string
	save  func() error
	log   logr.Logger
	dirty chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newWriteBehind(what string, save func() error, log logr.Logger) *writeBehind {
	return &writeBehind{what: what, save: save, log: log, dirty: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// mark says the state changed; it never blocks, so the emulator and the
// host network call it as they change.
func (b *writeBehind) mark() {
	select {
	case b.dirty <- struct{}{}:
	default:
	}
}

// start writes the state once now and then after every change; changes
// marked before start are written by that first write.
func (b *writeBehind) start() {
	select {
	case <-b.dirty:
	default:
	}
	b.write()
	go b.loop()
}

func (b *writeBehind) loop() {
	defer close(b.done)
	for {
		select {
		case <-b.dirty:
		case <-b.stop:
			return
		}
		select {
		case <-time.After(saveDelay):
		case <-b.stop:
		}
		b.write()
	}
}

func (b *writeBehind) write() {
	if err := b.save(); err != nil {
		b.log.Error(err, "saving the world's state", "what", b.what)
	}
}

// close stops the writes and writes the state a last time.
func (b *writeBehind) close() {
	close(b.stop)
	<-b.done
	b.write()
}
