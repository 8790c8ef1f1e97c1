package machines

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/hostnet"
)

var _ arm.DataPlane = (*Runtime)(nil)

// ProgramLoadBalancers carries the load balancers' rules as the emulator
// holds them (arm.DataPlane): each rule's frontend listens on its public
// IP's loopback address (or, for an internal load balancer, on the host
// address of its private frontend address) and forwards TCP connections to
// the host addresses of the backend pool's members, on the backend port,
// as the rule's probe lets them in. Whatever sends traffic through a load
// balancer, the API server's included, goes through its rules: a wrong rule
// fails here as it would on Azure.
func (r *Runtime) ProgramLoadBalancers(rules []arm.LBRule) {
	net := r.opts.Network
	var out []hostnet.Rule
	for _, lr := range rules {
		switch {
		case lr.Protocol == "Udp":
			// The local world's network carries connections, not packets.
			r.skipRule(lr, "UDP rules carry no traffic in the local world")
			continue
		case lr.FrontendPort == 0 || lr.BackendPort == 0:
			r.skipRule(lr, "HA-ports rules (port 0) carry no traffic in the local world")
			continue
		case lr.FrontendIP == "":
			continue // its public IP has no address yet
		}
		front, err := r.frontend(lr)
		if err != nil {
			r.opts.Log.Error(err, "load balancer frontend", "rule", lr.ID)
			continue
		}
		hr := hostnet.Rule{
			Frontend:     front,
			Distribution: hostnet.Distribution(lr.Distribution),
			IdleTimeout:  lr.IdleTimeout,
		}
		// By host address, what the NSGs in front of each backend admit.
		admission := map[netip.Addr]*arm.Inbound{}
		for _, ip := range lr.Backends {
			h, err := net.HostAddress(ip)
			if err != nil {
				r.opts.Log.Error(err, "load balancer backend", "rule", lr.ID, "backend", ip)
				continue
			}
			hr.Backends = append(hr.Backends, joinPort(h.String(), lr.BackendPort))
			admission[h] = lr.Admission[ip]
		}
		if p := lr.Probe; p != nil {
			hr.Probe = &hostnet.Probe{Protocol: p.Protocol, Port: p.Port, Path: p.Path, Interval: p.Interval, Threshold: p.Threshold}
		}
		hr.Admit, hr.ProbeAdmit = r.nsgFilters(lr, admission)
		out = append(out, hr)
	}
	if err := net.SetRules(out); err != nil {
		r.opts.Log.Error(err, "programming the load balancers' frontends")
	}
}

// nsgFilters are a rule's admission decisions as the local network asks
// them, by a backend's host address and port: a connection's source is the
// client's address, for a public frontend as it is (a client of the
// local world is outside every VNet: the Internet service tag), for an
// internal frontend the VNet address of a machine whose host address it is
// (on Azure an internal load balancer's clients reach it from inside the
// VNet); a health probe comes from AzureLoadBalancer.
func (r *Runtime) nsgFilters(lr arm.LBRule, admission map[netip.Addr]*arm.Inbound) (func(string, netip.Addr) bool, func(string) bool) {
	hn := r.opts.Network
	inbound := func(hostPort string) (*arm.Inbound, int, bool) {
		ap, err := netip.ParseAddrPort(hostPort)
		if err != nil {
			return nil, 0, false
		}
		in, ok := admission[ap.Addr()]
		return in, int(ap.Port()), ok
	}
	admit := func(backend string, src netip.Addr) bool {
		in, port, ok := inbound(backend)
		if !ok {
			return false
		}
		if lr.FrontendPrivate {
			if p, ok := hn.Private(src); ok {
				if a, err := netip.ParseAddr(p); err == nil {
					src = a
				}
			}
		}
		return in.Admits(src, port)
	}
	probe := func(target string) bool {
		in, port, ok := inbound(target)
		return ok && in.Admits(arm.AzureLoadBalancerIP, port)
	}
	return admit, probe
}

// skipRule says once per rule why it carries nothing.
func (r *Runtime) skipRule(lr arm.LBRule, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.skipped == nil {
		r.skipped = map[string]bool{}
	}
	if r.skipped[strings.ToLower(lr.ID)] {
		return
	}
	r.skipped[strings.ToLower(lr.ID)] = true
	r.opts.Log.Info("load-balancing rule skipped: "+why, "rule", lr.ID)
}

// frontend is where a rule's connections arrive on the host: its public
// IP's address, or the host address of an internal load balancer's
// private frontend address, with the rule's port.
func (r *Runtime) frontend(lr arm.LBRule) (string, error) {
	front := lr.FrontendIP
	if lr.FrontendPrivate {
		h, err := r.opts.Network.HostAddress(lr.FrontendIP)
		if err != nil {
			return "", err
		}
		front = h.String()
	}
	return joinPort(front, lr.FrontendPort), nil
}

// InRotation lists the host addresses of the backends a rule's probe lets
// new connections go to now, for diagnosis.
func (r *Runtime) InRotation(lr arm.LBRule) []string {
	front, err := r.frontend(lr)
	if err != nil {
		return nil
	}
	return r.opts.Network.InRotation(front)
}

func joinPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// PodRoute says, for diagnosis, whether a connection from node nodeName
// reaches pod IP ip now, as its own connections and what its kube-proxy
// forwards take it: "" when it does, else why not.
func (r *Runtime) PodRoute(nodeName string, ip netip.Addr) string {
	m := r.machineOfNode(nodeName)
	if m == nil {
		return "no such node"
	}
	if err := r.podRoute(m, ip); err != nil {
		return err.Error()
	}
	return ""
}

// machineOfNode is the machine that runs node nodeName, or nil.
func (r *Runtime) machineOfNode(nodeName string) *machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.machines {
		if m.nodeName == nodeName {
			return m
		}
	}
	return nil
}
