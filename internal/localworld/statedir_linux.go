package localworld

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockHolder finds the process holding the flock on f in /proc/locks
// (proc(5)), by the file's device and inode: the kernel records the pid
// that took the lock, where a pid file only says who once wrote it.
func lockHolder(f *os.File) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no device and inode", f.Name())
	}
	// proc_locks_show prints MAJOR:MINOR in hex and the inode in decimal.
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(sys.Dev), unix.Minor(sys.Dev), sys.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0, err
	}
	defer locks.Close()
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4242 fe:00:9978094 0 EOF"; a
		// waiter's line has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		return pid, nil
	}
	return 0, sc.Err()
}

func signalHolder(dir string, sig syscall.Signal) (int, error) {
	pid, held, err := Holder(dir)
	if err != nil || !held {
		return 0, err
	}
	if pid == 0 {
		return 0, fmt.Errorf("state directory %s is in use, and /proc/locks does not say by which process: stop its winkube up (Ctrl-C) and run down again", dir)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("the winkube holding %s (pid %d): %w", dir, pid, err)
	}
	defer unix.Close(pidfd)
	// The pidfd names one process for good; if it is still the lock's
	// holder now, it is the process that holds the world.
	again, held, err := Holder(dir)
	if err != nil {
		return 0, err
	}
	if !held {
		return 0, nil
	}
	if again != pid {
		return 0, fmt.Errorf("state directory %s changed hands (pid %d, then %d) while down looked: run down again", dir, pid, again)
	}
	if err := unix.PidfdSendSignal(pidfd, unix.Signal(sig), nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return 0, fmt.Errorf("signalling the winkube holding %s (pid %d): %w", dir, pid, err)
	}
	return pid, nil
}

// checkPrivate refuses a state directory another user could change: one
// not owned by this user, or writable by its group or by everyone. Such a
// user could put their own socket in place of the registry's push socket
// (a directory's write permission lets anyone in the group rename or
// remove its entries, path_resolution(7) and rename(2)), or replace a
// kubeconfig the world writes. A sticky directory (/tmp) is refused too:
// it protects entries from removal, not a name from being taken first.
func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("state directory %s: cannot read its owner", dir)
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("state directory %s belongs to user %d, not to you (%d): another user controls what is in it; name a directory of your own with --state-dir", dir, st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("state directory %s has mode %#o: its group or other users can replace the world's files and its image push socket in it; run `chmod go-w %s` (winkube makes new state directories 0700) or name another directory with --state-dir", dir, perm, dir)
	}
	return nil
}
