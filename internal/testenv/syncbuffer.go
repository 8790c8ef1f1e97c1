package testenv

import (
	"bytes"
	"sync"
)

// SyncBuffer is a buffer that a test reads while another goroutine writes
// it: a manager's logs, a process's output, a long run's progress.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
