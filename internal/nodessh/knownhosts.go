package nodessh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// KnownHosts is the known-hosts file winkube keeps: a host seen for the
// first time is added, one whose key changed is refused without a prompt.
type KnownHosts struct {
	Path string
	mu   sync.Mutex
}

// HostKeyMismatchError says that a host's key is not the one recorded.
type HostKeyMismatchError struct {
	Host, Path string
	Got        ssh.PublicKey
	Want       []knownhosts.KnownKey
}

func (e *HostKeyMismatchError) Error() string {
	lines := make([]string, 0, len(e.Want))
	for _, w := range e.Want {
		lines = append(lines, fmt.Sprint(w.Line))
	}
	return fmt.Sprintf("host key of %s is %s, not the key recorded in %s (line %s): the machine was replaced, or something is in between. "+
		"If you know it was replaced, remove the line (ssh-keygen -R %q -f %s) and connect again",
		e.Host, ssh.FingerprintSHA256(e.Got), e.Path, strings.Join(lines, ", "), knownhosts.Normalize(e.Host), e.Path)
}

// Callback checks the key of host (host:port, or an alias the caller
// chooses) against the file, adding it when the host is new.
func (k *KnownHosts) Callback(host string) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		if err := plainHost(host); err != nil {
			return err
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if err := os.MkdirAll(filepath.Dir(k.Path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(k.Path, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
		check, err := knownhosts.New(k.Path)
		if err != nil {
			return fmt.Errorf("known-hosts file %s: %w", k.Path, err)
		}
		// The address given is the host's as the file names it; the
		// remote address is not consulted when one is given.
		err = check(host, &net.TCPAddr{IP: net.IPv4zero, Port: 22}, key)
		var ke *knownhosts.KeyError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke) && len(ke.Want) > 0:
			return &HostKeyMismatchError{Host: host, Path: k.Path, Got: key, Want: ke.Want}
		case errors.As(err, &ke):
			f, err := os.OpenFile(k.Path, os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = fmt.Fprintln(f, knownhosts.Line([]string{host}, key))
			return err
		default:
			return err
		}
	}
}

// plainHost refuses a host that is not a plain name or address with its
// port. Hosts come from objects a management cluster's tenants may write
// (a machine's address, the cluster's endpoint), and a known-hosts line
// separates hosts with commas and fields with spaces, reads * and ? as
// patterns, ! as negation, @ as a marker and # as a comment
// (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT): any of them, or a line break,
// would make the line winkube adds vouch for hosts it never saw.
func plainHost(host string) error {
	for _, r := range host {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune(".-_:[]", r):
		default:
			return fmt.Errorf("refusing to record host %q in the known-hosts file: %q is not part of a host name or address", host, r)
		}
	}
	return nil
}
