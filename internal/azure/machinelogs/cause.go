package machinelogs

import (
	"regexp"
	"strings"
)

// causes are the lines that say why a bootstrap stopped, most telling
// first, as the real tools write them:
//   - kubeadm's phase runner wraps the failing phase's error in "error
//     execution phase <phase>: ..." (k8s.io/kubernetes v1.36.3
//     cmd/kubeadm/app/cmd/phases/workflow/runner.go);
//   - cloud-init reports a failing runcmd script as "Failed to run module
//     scripts-user (scripts in /var/lib/cloud/instance/scripts)" after
//     "Runparts: 1 failures (runcmd) in 1 attempted commands"
//     (canonical/cloud-init @04eacd06e, cloudinit/config/cc_scripts_user.py,
//     cloudinit/subp.py runparts);
//   - cloudbase-init logs through oslo.log, "<time> <pid> ERROR <logger>
//     [-] <message>", a plugin's failure as "plugin '<name>' failed with
//     error '<error>'" (cloudbase/cloudbase-init @c48d759,
//     cloudbaseinit/init.py);
//   - anything else that reports an error.
var causes = []*regexp.Regexp{
	regexp.MustCompile(`error execution phase .*`),
	regexp.MustCompile(`Failed to run module .*`),
	regexp.MustCompile(`\bERROR\b.*`),
	regexp.MustCompile(`(?i)\b(failed|error)\b.*`),
}

// Cause is the line of a bootstrap log that says why the bootstrap
// stopped: the last line of the most telling kind, without its timestamp
// prefix; "" when no line says.
func Cause(log string) string {
	lines := strings.Split(log, "\n")
	for _, re := range causes {
		for i := len(lines) - 1; i >= 0; i-- {
			if m := re.FindString(lines[i]); m != "" {
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
