package doctor

import (
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// bootstrapFixes say what to change for a bootstrap that failed, by what
// its log's cause line says. The texts matched are kubeadm's, the
// kubelet's and cloud-init's / cloudbase-init's own (see
// internal/azure/machinelogs/cause.go for where each comes from), so the
// same advice holds on Azure.
var bootstrapFixes = []struct {
	re  *regexp.Regexp
	fix string
}{
	{regexp.MustCompile(`write_files|decode base64|Incorrect padding|binascii`),
		"a file of the bootstrap config (KubeadmConfigTemplate spec.files) could not be written: correct its content or encoding; cloud-init stops at it, so the files after it (the kubeadm configuration) are missing"},
	{regexp.MustCompile(`JWS signature|token id .* is invalid|token ID`),
		"the bootstrap token expired or was deleted before the machine joined: delete the Machine so that Cluster API makes a new one with a fresh token (its tokens last 15 minutes unless the KubeadmConfig says otherwise); do not set joinConfiguration.discovery.bootstrapToken.token yourself"},
	{regexp.MustCompile(`none of the public keys .* are pinned|failed to verify JWS|unpinned CA`),
		"joinConfiguration.discovery.bootstrapToken.caCertHashes does not match the cluster's CA: remove it from the KubeadmConfigTemplate (Cluster API fills in the right one) or correct it"},
	{regexp.MustCompile(`unknown flag`),
		"the kubelet refused a flag of its version: remove it from nodeRegistration.kubeletExtraArgs (winkube logs NODE shows the kubelet's log)"},
	{regexp.MustCompile(`CRI v1 runtime API|container runtime|pipe|containerd\.sock`),
		"the kubelet cannot reach the container runtime: nodeRegistration.criSocket must be npipe:////./pipe/containerd-containerd on Windows, unix:///var/run/containerd/containerd.sock on Linux"},
	{regexp.MustCompile(`kubelet-check|kubelet-start|kubelet is not healthy`),
		"kubeadm gave up waiting for the kubelet: read the kubelet's log (winkube logs NODE, or Run Command) for why it exits, often a flag in kubeletExtraArgs or the criSocket"},
	{regexp.MustCompile(`couldn't validate the identity of the API Server`),
		"the node cannot reach the API server: check the controlPlaneEndpoint and the discovery apiServerEndpoint, the API server load balancer's rule and probe, and the node subnet's NSG and route table"},
	{regexp.MustCompile(`scripts_user|scripts-user|runcmd|preKubeadmCommands|CommandNotFoundException|is not recognized`),
		"a command of preKubeadmCommands failed: the log lines above show which; correct it in the KubeadmConfigTemplate"},
	{regexp.MustCompile(`azure\.json`),
		"the cloud provider's config file is missing: the bootstrap config must write the <template>-azure-json Secret's file (/etc/kubernetes/azure.json, c:/k/azure.json)"},
}

// bootstrapFix is the advice for a failed bootstrap's cause.
func bootstrapFix(cause string) string {
	for _, f := range bootstrapFixes {
		if f.re.MatchString(cause) {
			return f.fix
		}
	}
	return "read the end of the bootstrap log in the condition (or collect the node's logs: winkube logs MACHINE); delete the Machine to retry once fixed"
}

// bootstrapFailed reports a machine whose node never registered, with the
// cause, the end of its bootstrap log the provider read through Azure, and
// the fix.
func bootstrapFailed(kind string, m metav1.ObjectMeta, conds []metav1.Condition) []Finding {
	for _, c := range conds {
		if c.Type != infrav1.BootstrapSucceededCondition || c.Status != metav1.ConditionFalse {
			continue
		}
		obj := ref(kind, m.Namespace, m.Name)
		switch c.Reason {
		case infrav1.BootstrapFailedReason:
			cause, _, _ := strings.Cut(c.Message, "\n")
			return []Finding{{Check: "machines", Severity: Error, Object: obj,
				Message: fmt.Sprintf("%s %s/%s did not become a node: %s", kind, m.Namespace, m.Name, c.Message), Fix: bootstrapFix(cause)}}
		case infrav1.WaitingForNodeReason:
			return []Finding{{Check: "machines", Severity: Info, Object: obj,
				Message: fmt.Sprintf("%s %s/%s is provisioned and bootstrapping (no node yet, for %s)", kind, m.Namespace, m.Name, sinceTransition(c)),
				Fix:     "wait: the provider reads its bootstrap log if no node registers by the bootstrap deadline"}}
		}
	}
	return nil
}

func sinceTransition(c metav1.Condition) string {
	return metav1.Now().Sub(c.LastTransitionTime.Time).Round(1e9).String()
}
