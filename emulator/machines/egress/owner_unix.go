//go:build unix

package egress

import (
	"os"
	"syscall"
)

// ownedByMe says whether this process's user owns the file.
func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
