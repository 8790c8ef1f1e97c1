package machinelogs

import (
	"regexp"
	"strconv"
	"strings"
)

// causes are the lines that say why a bootstrap stopped, most telling
// first, as the real tools write them; each is looked for from the end of
// the log, or from its start where the first one is the root (a module
// that failed makes the later ones fail):
//   - cloud-init's write_files stops at an entry it cannot decode and logs
//     "Running module write_files (...) failed"; the files after it (Cluster
//     API's kubeadm configuration comes last) are then missing, and what
//     kubeadm says next is only a consequence (canonical/cloud-init
//     @04eacd06e, cloudinit/config/modules.py, cloudinit/log/log_util.py);
//   - kubeadm's phase runner wraps the failing phase's error in "error
//     execution phase <phase>: ..." (k8s.io/kubernetes v1.36.3
//     cmd/kubeadm/app/cmd/phases/workflow/runner.go), and fails before
//     any phase with "unable to read config from ..."
//     (cmd/kubeadm/app/util/config/joinconfiguration.go);
//   - cloud-init reports a failing runcmd script as "Failed to run module
//     scripts-user (scripts in /var/lib/cloud/instance/scripts)" and
//     "Running module scripts_user (...) failed" (cc_scripts_user.py,
//     subp.py runparts, modules.py);
//   - cloudbase-init logs through oslo.log, "<time> <pid> ERROR <logger>
//     [-] <message>", a plugin's failure as "plugin '<name>' failed with
//     error '<error>'" (cloudbase/cloudbase-init @c48d759,
//     cloudbaseinit/init.py);
//   - anything else that reports an error.
var causes = []struct {
	re    *regexp.Regexp
	first bool
}{
	{regexp.MustCompile(`Running module write_files .*failed`), true},
	{regexp.MustCompile(`error execution phase .*`), false},
	{regexp.MustCompile(`unable to read config from .*`), false},
	{regexp.MustCompile(`Failed to run module .*|Running module \S+ \(.*\) failed`), true},
	{regexp.MustCompile(`\bERROR\b.*`), false},
	{regexp.MustCompile(`(?i)\b(failed|error)\b.*`), false},
}

// Cause is the line of a bootstrap log that says why the bootstrap
// stopped, without its timestamp prefix; "" when no line says.
func Cause(log string) string {
	lines := strings.Split(log, "\n")
	for _, c := range causes {
		for k := range lines {
			i := len(lines) - 1 - k
			if c.first {
				i = k
			}
			if m := c.re.FindString(lines[i]); m != "" {
				return strings.TrimSpace(oneLine(m))
			}
		}
	}
	return ""
}

// oneLine keeps a condition's summary short: a cause of more than 300
// characters is cut, since the log's tail follows it anyway.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\r")
	if len(s) > 300 {
		return s[:297] + "..."
	}
	return s
}

// kubeletFailed is the kubelet's own last word before it exited: klog's
// "command failed" line of its run (k8s.io/kubernetes v1.36.3
// cmd/kubelet/app/server.go, component-base/cli/run.go), whose err= is
// what was wrong (an unknown flag, a container runtime it cannot reach).
var kubeletFailed = regexp.MustCompile(`"command failed" err=(.*)`)

// KubeletCause is the reason the kubelet's log gives for exiting; "" when
// it gives none.
func KubeletCause(log string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := kubeletFailed.FindStringSubmatch(lines[i]); m != nil {
			err := strings.TrimSpace(m[1])
			if u, uerr := strconv.Unquote(err); uerr == nil {
				err = u // klog quotes the value, %q
			}
			return oneLine(err)
		}
	}
	return ""
}

// KubeletGaveUp says whether a bootstrap's cause is kubeadm giving up
// waiting for the kubelet (its kubelet-start phase), so that the kubelet's
// log has the reason.
func KubeletGaveUp(cause string) bool {
	return strings.Contains(cause, "kubelet-start") || strings.Contains(cause, "kubelet-check")
}
