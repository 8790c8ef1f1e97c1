package doctor

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ccmRunning says whether a cloud-controller-manager pod runs Ready in
// kube-system: only its service controller gives LoadBalancer Services an
// address (cloud-provider-azure's chart labels its pods
// component=cloud-controller-manager).
func (s *State) ccmRunning() (running bool, found int) {
	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Namespace != "kube-system" || !isCCM(p) {
			continue
		}
		found++
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			running = true
		}
	}
	return running, found
}

func isCCM(p *corev1.Pod) bool {
	if p.Labels["component"] == "cloud-controller-manager" {
		return true
	}
	for _, c := range p.Spec.Containers {
		if strings.Contains(c.Image, "/azure-cloud-controller-manager:") {
			return true
		}
	}
	return false
}

// lastLBFailure is the newest SyncLoadBalancerFailed event of a Service.
func (s *State) lastLBFailure(svc *corev1.Service) *corev1.Event {
	var last *corev1.Event
	for i := range s.Events {
		e := &s.Events[i]
		if e.Reason != "SyncLoadBalancerFailed" || e.InvolvedObject.Kind != "Service" || e.InvolvedObject.Namespace != svc.Namespace || e.InvolvedObject.Name != svc.Name {
			continue
		}
		if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != svc.UID {
			continue // an earlier Service of the same name
		}
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	return last
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// readyEndpoints counts a Service's ready endpoint addresses.
func (s *State) readyEndpoints(svc *corev1.Service) int {
	n := 0
	for i := range s.Slices {
		sl := &s.Slices[i]
		if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				n += len(ep.Addresses)
			}
		}
	}
	return n
}

// LoadBalancers explains why a LoadBalancer Service has no external IP, or
// why the one it has answers nothing: what `curl <EXTERNAL-IP>` would not
// say. A Service that selects no pod is the services check's.
func LoadBalancers(s *State) []Finding {
	var out []Finding
	running, ccms := s.ccmRunning()
	for i := range s.Services {
		svc := &s.Services[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
			continue
		}
		obj := ref("Service", svc.Namespace, svc.Name)
		key := svc.Namespace + "/" + svc.Name
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			switch f := s.lastLBFailure(svc); {
			case !running && ccms == 0:
				out = append(out, Finding{Check: "load-balancers", Severity: Error, Object: obj,
					Message: fmt.Sprintf("LoadBalancer Service %s has no external IP: no cloud-controller-manager runs in kube-system, and only its service controller programs Azure's load balancer", key),
					Fix:     "install cloud-provider-azure (winkube's flavors deliver it by a ClusterResourceSet: check the cluster has the label cloud-provider: azure)"})
			case !running:
				out = append(out, Finding{Check: "load-balancers", Severity: Error, Object: obj,
					Message: fmt.Sprintf("LoadBalancer Service %s has no external IP: the cloud-controller-manager in kube-system is not Running and Ready", key),
					Fix:     "kubectl -n kube-system describe pods -l component=cloud-controller-manager (its azure.json and credentials are the usual causes)"})
			case f != nil:
				why, fix := ExplainLoadBalancerFailure(f.Message)
				if why != "" {
					why = " " + why + "."
				}
				if fix == "" {
					fix = "fix what the message names; kubectl describe service " + svc.Name + " -n " + svc.Namespace + " shows the newest attempt"
				}
				out = append(out, Finding{Check: "load-balancers", Severity: Error, Object: obj,
					Message: fmt.Sprintf("LoadBalancer Service %s has no external IP: the cloud provider failed to program its load balancer.%s Its last attempt: %s", key, why, firstLines(f.Message, 3)),
					Fix:     fix})
			default:
				out = append(out, Finding{Check: "load-balancers", Severity: Info, Object: obj,
					Message: fmt.Sprintf("LoadBalancer Service %s is waiting for its external IP (the cloud-controller-manager runs; Azure takes a minute or so)", key)})
			}
			continue
		}
		if len(svc.Spec.Selector) == 0 || s.readyEndpoints(svc) > 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		selected, notReady := 0, []string{}
		for j := range s.Pods {
			p := &s.Pods[j]
			if p.Namespace == svc.Namespace && p.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Labels)) {
				selected++
				if !podReady(p) {
					notReady = append(notReady, p.Name)
				}
			}
		}
		if selected == 0 {
			continue
		}
		out = append(out, Finding{Check: "load-balancers", Severity: Error, Object: obj,
			Message: fmt.Sprintf("LoadBalancer Service %s has external IP %s but no ready endpoint: its %d selected pod(s) are not Ready (%s), so every node fails the load balancer's health probe and the IP answers nothing", key, ingressOf(svc), selected, strings.Join(notReady, ", ")),
			Fix:     "kubectl describe pods of the Service: a failing readiness probe or a container that does not start keeps them out"})
	}
	return out
}

func ingressOf(svc *corev1.Service) string {
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			ips = append(ips, in.IP)
		} else if in.Hostname != "" {
			ips = append(ips, in.Hostname)
		}
	}
	return strings.Join(ips, ", ")
}

// firstLines keeps the first n lines of an SDK error, whose request and
// response dumps follow its message.
func firstLines(msg string, n int) string {
	lines := strings.SplitN(msg, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, " ")
}

// explanation is what doctor says of a failure whose message carries
// any of says: why it failed and what to change.
type explanation struct {
	says     []string
	why, fix string
}

// explain is the first row of table whose says the message carries: more
// specific rows go first (LinkedAuthorizationFailed before
// AuthorizationFailed, which it contains). Both are "" when none does.
func explain(table []explanation, msg string) (why, fix string) {
	for _, e := range table {
		for _, s := range e.says {
			if strings.Contains(msg, s) {
				return e.why, e.fix
			}
		}
	}
	return "", ""
}

// loadBalancerFailures are the cloud provider's credential failures, by
// the words Entra ID (its AADSTS codes), the Instance Metadata Service (as
// azidentity v1.15.0 reports it, managed_identity_client.go) and ARM
// (AuthorizationFailed) use.
var loadBalancerFailures = []explanation{
	{[]string{"AADSTS7000215", "AADSTS7000222"},
		"Entra ID refused the service principal's secret in azure.json (aadClientSecret): it is wrong (often the secret's ID pasted for its value) or has expired",
		"put the service principal's current secret value in the Secret its AzureClusterIdentity names (az ad sp credential reset --id <aadClientId> --append adds one without revoking the others); winkube rewrites the <machine>-azure-json Secrets from it, and new nodes get it: replace the control-plane machines (or edit /etc/kubernetes/azure.json on them) and restart the cloud-controller-manager pods"},
	{[]string{"AADSTS90002"},
		"Entra ID knows no such tenant (azure.json's tenantId)",
		"set the AzureClusterIdentity's tenantID to the directory the service principal is in (az account show --query tenantId)"},
	{[]string{"AADSTS700016"},
		"Entra ID knows no such application in that tenant (azure.json's aadClientId)",
		"check the AzureClusterIdentity's clientID against az ad sp show --id <aadClientId>, and that its tenantID is that service principal's"},
	{[]string{"the requested identity isn't assigned to this resource"},
		"azure.json names a user-assigned managed identity (userAssignedIdentityID) that is not attached to the VM the cloud-controller-manager runs on",
		"attach it to the control-plane machines (identity: UserAssigned with userAssignedIdentities in their AzureMachineTemplate; a new template rolls the control plane), or give the cluster an identity its nodes have"},
	{[]string{"failed to authenticate a system assigned identity"},
		"azure.json asks for the VM's managed identity (useManagedIdentityExtension) and the VM the cloud-controller-manager runs on has none",
		"set identity: SystemAssigned on the control plane's AzureMachineTemplate (winkube then grants it Contributor on the cluster's resource group, for which the manager needs User Access Administrator or Owner), or reference an AzureClusterIdentity of type ServicePrincipal from the AzureCluster"},
	{[]string{"LinkedAuthorizationFailed"},
		"the cloud provider's identity may act on the load balancer but not on a resource it links to (a subnet or public IP in another resource group, such as the VNet's in vnetResourceGroup)",
		"grant the identity Network Contributor on the resource group the message names (az role assignment create --assignee-object-id <the object id in the message> --assignee-principal-type ServicePrincipal --role \"Network Contributor\" --scope <that group's ID>)"},
	{[]string{"AuthorizationFailed"},
		"the cloud provider's identity authenticated, and ARM refused it the action: it has no role on the cluster's resource group",
		"grant it Contributor on the cluster's resource group (az role assignment create --assignee-object-id <the object id in the message> --assignee-principal-type ServicePrincipal --role Contributor --scope <the resource group's ID>); for a machine's system-assigned identity, systemAssignedIdentityRole says which role winkube grants"},
}

// ExplainLoadBalancerFailure says which credential of the cloud provider
// failed, and what to change, from the service controller's message (the
// rows of loadBalancerFailures). Both are "" for other failures.
func ExplainLoadBalancerFailure(msg string) (why, fix string) {
	return explain(loadBalancerFailures, msg)
}
