// Package nodeaccess finds, from the management cluster, how to reach a
// node of a workload cluster: the machine behind a Machine, AzureMachine,
// AzureMachinePoolMachine or Node name, its OS and private address, and
// the jump hosts in front of it (the API server's public address with the
// NAT port of each control-plane VM), as CAPZ's clusters are reached.
package nodeaccess

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Target is a machine to reach, and how.
type Target struct {
	// Cluster is the workload cluster's name; Namespace holds its objects.
	Cluster, Namespace string
	// Object names the infrastructure object: AzureMachine/NAME or
	// AzureMachinePoolMachine/NAME.
	Object string
	// Hostname is the machine's computer name (Windows: 15 characters at most).
	Hostname string
	// Address is the machine's private IP address.
	Address      string
	OS           infrav1.OSType
	ControlPlane bool
	// Direct is true when the first jump host is the target itself: a
	// control-plane VM with an SSH NAT rule of its own.
	Direct bool
	// JumpHosts are host:port pairs of the control-plane VMs' SSH NAT
	// rules, in the order to try. A control-plane target is reached
	// directly through the first, which is its own.
	JumpHosts []string
}

// Windows says whether the target runs Windows.
func (t *Target) Windows() bool { return t.OS == infrav1.Windows }

// candidate is one infrastructure machine the name may mean.
type candidate struct {
	obj          string
	cluster      string
	hostname     string
	address      string
	os           infrav1.OSType
	natPort      int32
	controlPlane bool
	provisioned  bool
}

// Resolve finds what name means in namespace: a Machine, an AzureMachine
// or AzureMachinePoolMachine, a VM or computer name, a Node (by the
// Machine's nodeRef) or a private address. cluster, when set, narrows the
// search to one cluster.
func Resolve(ctx context.Context, c client.Reader, namespace, name, cluster string) (*Target, error) {
	if name == "" {
		return nil, fmt.Errorf("name a Machine, AzureMachine, AzureMachinePoolMachine or Node")
	}
	in := client.InNamespace(namespace)
	var (
		machines clusterv1.MachineList
		ams      infrav1.AzureMachineList
		ampms    infrav1.AzureMachinePoolMachineList
		pools    infrav1.AzureMachinePoolList
	)
	for _, l := range []client.ObjectList{&machines, &ams, &ampms, &pools} {
		if err := c.List(ctx, l, in); err != nil {
			return nil, fmt.Errorf("reading the management cluster: %w", err)
		}
	}
	all := map[string]*candidate{}
	for i := range ams.Items {
		am := &ams.Items[i]
		cand := &candidate{obj: "AzureMachine/" + am.Name, cluster: am.Labels[clusterv1.ClusterNameLabel], os: am.Spec.OS(),
			natPort: am.Status.SSHNATPort, provisioned: am.Status.Initialization.Provisioned != nil && *am.Status.Initialization.Provisioned}
		_, cand.controlPlane = am.Labels[clusterv1.MachineControlPlaneLabel]
		cand.controlPlane = cand.controlPlane || am.Status.SSHNATPort > 0
		cand.hostname, cand.address = addresses(am.Status.Addresses)
		if cand.hostname == "" {
			cand.hostname = am.Status.VMName
		}
		all[cand.obj] = cand
	}
	poolOS := map[string]infrav1.OSType{}
	for _, p := range pools.Items {
		poolOS[p.Name] = p.Spec.Template.OS()
	}
	for i := range ampms.Items {
		m := &ampms.Items[i]
		cand := &candidate{obj: "AzureMachinePoolMachine/" + m.Name, cluster: m.Labels[clusterv1.ClusterNameLabel], os: poolOS[m.Labels[infrav1.MachinePoolNameLabel]],
			provisioned: m.Status.Initialization.Provisioned != nil && *m.Status.Initialization.Provisioned}
		if cand.os == "" {
			cand.os = infrav1.Linux
		}
		cand.hostname, cand.address = addresses(m.Status.Addresses)
		if cand.hostname == "" {
			cand.hostname = m.Status.ComputerName
		}
		all[cand.obj] = cand
	}

	matches := map[string]string{} // object -> why it matches
	match := func(obj, why string) {
		if _, ok := all[obj]; ok {
			if _, seen := matches[obj]; !seen {
				matches[obj] = why
			}
		}
	}
	for _, m := range machines.Items {
		obj := m.Spec.InfrastructureRef.Kind + "/" + m.Spec.InfrastructureRef.Name
		if m.Name == name {
			match(obj, "Machine "+m.Name)
		}
		if m.Status.NodeRef.Name == name {
			match(obj, "Node "+name+" of Machine "+m.Name)
		}
	}
	for obj, cand := range all {
		_, objName, _ := strings.Cut(obj, "/")
		switch {
		case objName == name:
			match(obj, obj)
		case strings.EqualFold(cand.hostname, name):
			match(obj, "computer name "+cand.hostname+" of "+obj)
		case cand.address != "" && cand.address == name:
			match(obj, "address "+name+" of "+obj)
		}
	}
	var found []string
	for obj := range matches {
		if cluster == "" || all[obj].cluster == cluster {
			found = append(found, obj)
		}
	}
	sort.Strings(found)
	switch {
	case len(found) == 0 && cluster != "" && len(matches) > 0:
		return nil, fmt.Errorf("%q is not a machine of cluster %s in namespace %s", name, cluster, namespace)
	case len(found) == 0:
		return nil, fmt.Errorf("no Machine, AzureMachine, AzureMachinePoolMachine or Node named %q in namespace %s (kubectl get machines -A lists them; -n picks the namespace)", name, namespace)
	case len(found) > 1:
		var what []string
		for _, obj := range found {
			what = append(what, fmt.Sprintf("%s (cluster %s)", matches[obj], all[obj].cluster))
		}
		return nil, fmt.Errorf("%q matches %d machines: %s; name one of them, or pass --cluster", name, len(found), strings.Join(what, ", "))
	}
	cand := all[found[0]]
	t := &Target{Cluster: cand.cluster, Namespace: namespace, Object: cand.obj, Hostname: cand.hostname, Address: cand.address, OS: cand.os, ControlPlane: cand.controlPlane}
	if t.Address == "" {
		return nil, fmt.Errorf("%s has no private address yet: its VM is still being created (kubectl get %s -n %s)", t.Object, strings.ToLower(t.Object), namespace)
	}
	// The address is dialled and names the node in the known-hosts file;
	// whoever may write the object's status chose it.
	if !literalIP(t.Address) {
		return nil, fmt.Errorf("%s reports internal address %q, which is not an IP address: refusing to connect to it", t.Object, t.Address)
	}
	// The hostname is printed: no control character (a terminal's escape
	// sequences) of whoever wrote the status reaches the user's terminal.
	t.Hostname = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, t.Hostname)
	host, err := apiServerHost(ctx, c, namespace, t.Cluster)
	if err != nil {
		return nil, err
	}
	t.JumpHosts = jumpHosts(host, cand, all)
	t.Direct = cand.natPort > 0
	if len(t.JumpHosts) == 0 {
		return nil, fmt.Errorf("cluster %s has no control-plane machine with an SSH NAT rule yet: the jump host comes with the first control-plane VM", t.Cluster)
	}
	return t, nil
}

func addresses(as []clusterv1.MachineAddress) (hostname, internal string) {
	for _, a := range as {
		switch a.Type {
		case clusterv1.MachineHostName:
			if hostname == "" {
				hostname = a.Address
			}
		case clusterv1.MachineInternalIP:
			if internal == "" {
				internal = a.Address
			}
		}
	}
	return hostname, internal
}

// apiServerHost is the public address of the cluster's API server, whose
// load balancer carries the SSH NAT rules.
func apiServerHost(ctx context.Context, c client.Reader, namespace, cluster string) (string, error) {
	if cluster == "" {
		return "", fmt.Errorf("the machine has no %s label: it belongs to no cluster", clusterv1.ClusterNameLabel)
	}
	cl := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster}, cl); err != nil {
		return "", fmt.Errorf("cluster %s: %w", cluster, err)
	}
	if h := cl.Spec.ControlPlaneEndpoint.Host; h != "" {
		return plainEndpoint("Cluster "+cluster, h)
	}
	ac := &infrav1.AzureCluster{}
	if ref := cl.Spec.InfrastructureRef; ref.Name != "" {
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, ac); err == nil && ac.Spec.ControlPlaneEndpoint.Host != "" {
			return plainEndpoint("AzureCluster "+ref.Name, ac.Spec.ControlPlaneEndpoint.Host)
		}
	}
	return "", fmt.Errorf("cluster %s has no API server endpoint yet: its load balancer is still being created", cluster)
}

// literalIP reports whether s is an IP address with no IPv6 zone: a zone
// may carry any text.
func literalIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}

// plainEndpoint refuses an API server host that is neither an IP address
// nor a DNS name: it is dialled and recorded in the known-hosts file.
func plainEndpoint(what, host string) (string, error) {
	if literalIP(host) {
		return host, nil
	}
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(errs) > 0 {
		return "", fmt.Errorf("%s has API server host %q, which is neither an IP address nor a DNS name: refusing to connect to it", what, host)
	}
	return host, nil
}

// jumpHosts orders the cluster's SSH NAT rules: the target's own first,
// then provisioned machines before others, by name.
func jumpHosts(host string, target *candidate, all map[string]*candidate) []string {
	var cps []*candidate
	for _, c := range all {
		if c.cluster == target.cluster && c.natPort > 0 {
			cps = append(cps, c)
		}
	}
	sort.Slice(cps, func(i, j int) bool {
		a, b := cps[i], cps[j]
		if (a == target) != (b == target) {
			return a == target
		}
		if a.provisioned != b.provisioned {
			return a.provisioned
		}
		return a.obj < b.obj
	})
	out := make([]string, 0, len(cps))
	for _, c := range cps {
		out = append(out, net.JoinHostPort(host, strconv.Itoa(int(c.natPort))))
	}
	return out
}

// Name is a name Resolve accepts, with what it is, for shell completion.
type Name struct {
	Name, What string
}

// Names lists the Machine, AzureMachine, AzureMachinePoolMachine and Node
// names of namespace (of one cluster when cluster is set), sorted.
func Names(ctx context.Context, c client.Reader, namespace, cluster string) ([]Name, error) {
	in := client.InNamespace(namespace)
	var opts []client.ListOption
	opts = append(opts, in)
	if cluster != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.ClusterNameLabel: cluster})
	}
	var (
		machines clusterv1.MachineList
		ams      infrav1.AzureMachineList
		ampms    infrav1.AzureMachinePoolMachineList
	)
	for _, l := range []client.ObjectList{&machines, &ams, &ampms} {
		if err := c.List(ctx, l, opts...); err != nil {
			return nil, fmt.Errorf("reading the management cluster: %w", err)
		}
	}
	seen := map[string]bool{}
	var out []Name
	add := func(name, what string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, Name{Name: name, What: what})
		}
	}
	for _, m := range machines.Items {
		add(m.Status.NodeRef.Name, "Node of cluster "+m.Spec.ClusterName)
		add(m.Name, "Machine of cluster "+m.Spec.ClusterName)
	}
	for _, am := range ams.Items {
		add(am.Name, fmt.Sprintf("AzureMachine (%s)", am.Spec.OS()))
	}
	for _, m := range ampms.Items {
		add(m.Name, "AzureMachinePoolMachine")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
