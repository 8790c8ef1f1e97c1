package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/winkube/winkube/internal/localworld/bringup"
)

// listedLogs bounds how many machines a kept directory's message names:
// a thousand-node world's list would bury the error above it.
const listedLogs = 10

// FinishState removes the scratch state directory of a run that
// completed. A run that failed keeps it: the world is stopped by then and
// its machines' disks hold what went wrong (a node that never became
// Ready could not be examined once its directory was gone), so the error
// says where it is and which logs to read, those of the nodes named
// notReady first.
func FinishState(dir string, notReady []string, err error) error {
	if err == nil {
		return os.RemoveAll(dir)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the world's state is kept in %s (remove it when done): each machine's folder in %s holds the machine runtime's events for it (its boot log) and its node's kubelet log",
		dir, filepath.Join(dir, "machines"))
	picked, matched := pickLogs(bringup.MachineLogs(dir), notReady)
	switch {
	case len(picked) == 0:
		b.WriteString("; no machine wrote any")
	case matched:
		b.WriteString("; those of the nodes not Ready:")
	default:
		b.WriteString("; the machines' (those whose kubelet never started first):")
	}
	for i, l := range picked {
		if i == listedLogs {
			fmt.Fprintf(&b, "\n  and %d more", len(picked)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s: events %s, kubelet log %s", l.Machine, orNone(l.Events), orNone(l.Kubelet))
	}
	return fmt.Errorf("%w\n%s", err, b.String())
}

func orNone(p string) string {
	if p == "" {
		return "(none written)"
	}
	return p
}

// pickLogs are the machines whose kubelet registered one of the nodes
// not Ready (matched), or, when none did (no node was named, or none of
// theirs logged), every machine, those whose kubelet never started first.
func pickLogs(logs []bringup.MachineLog, notReady []string) (picked []bringup.MachineLog, matched bool) {
	var named, noKubelet, rest []bringup.MachineLog
	for _, l := range logs {
		switch {
		case registeredOneOf(l.Kubelet, notReady):
			named = append(named, l)
		case l.Kubelet == "":
			noKubelet = append(noKubelet, l)
		default:
			rest = append(rest, l)
		}
	}
	if len(named) > 0 {
		return named, true
	}
	return append(noKubelet, rest...), false
}

// registeredOneOf says whether the kubelet log at path is of one of the
// nodes: the simulated kubelet logs the node it registered, as the
// kubelet's "Successfully registered node" line does.
func registeredOneOf(path string, nodes []string) bool {
	if path == "" || len(nodes) == 0 {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	log := string(data)
	for _, n := range nodes {
		if strings.Contains(log, "registered node "+n+" ") {
			return true
		}
	}
	return false
}
