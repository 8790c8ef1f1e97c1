package kubeproxy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Windows' data plane (HNS and its VFP rules, which kube-proxy's
// kernelspace proxier programs) has limits the Linux one has not, by build:
//
//   - Service VIPs from the host. The seeds (KubeCon EU 2021, a Windows
//     Server 2019 node of build 17763.1817) and the Kubernetes docs of that
//     time list "Accessing service VIPs from nodes will be available with a
//     future release of Windows Server": a Windows Server 2019 host cannot
//     reach a ClusterIP; Windows Server 2022 (20348) and later can.
//   - 64 destinations per load balancer. A Service with more than 64
//     endpoints makes hcnCreateLoadBalancer fail with "Unable to initialize
//     VFP LB rule: invalid number of destinations" and kube-proxy leaves the
//     Service unprogrammed on that node, so its NodePort does not answer and
//     a cloud load balancer's probe takes the node out
//     (kubernetes/kubernetes#98680, microsoft/Windows-Containers#93).
//     Microsoft raised the limit to 1024 in a Windows Server 2019 cumulative
//     update (Windows-Containers#93; EKS's documentation moved from 64 to
//     1024 back-end pods in August 2022). The thread's comment naming the
//     update could not be read from the copies available when this was
//     written: maxDestinationsFixedRevision (17763.2746, the 2022-03 update)
//     is an assumption, the same one winkube's admission and doctor make
//     (they cannot share a constant: the emulator imports nothing of
//     winkube), kept in one place here to correct.
//     The docs' Limitations now say "More than 1024 backend pods (or
//     unique destination addresses) for a single Service"
//     (windows-networking.md at kubernetes/website
//     038a69be0aae7dacdbdd60d7398880b5babbf343; kubernetes/kubernetes#135518
//     asked to drop the older 64), which confirms 1024 but not the revision.
//   - Session affinity (ClientIP) needs Windows Server 2022: the Kubernetes
//     docs' table of Windows Service features names it as the minimum
//     (kubernetes/website content/en/docs/concepts/services-networking/
//     windows-networking.md, "Windows Service Settings", read at commit
//     038a69be0aae7dacdbdd60d7398880b5babbf343). kube-proxy asks HNS for
//     the feature (hcsshim hcn/hcnglobals.go SessionAffinityVersion: HNS
//     12.0) and, without it, logs "Session Affinity is not supported on
//     this version of Windows" and goes on (k8s.io/kubernetes@v1.36.3
//     pkg/proxy/winkernel/proxier.go, syncProxyRules). Where it is
//     supported, kube-proxy only sets the load balancer's distribution to
//     "source IP" (winkernel/hns.go getLoadBalancer: DistributionType
//     hcn.LoadBalancerDistributionSourceIP); HNS's load balancer has no
//     timeout field (hcsshim hcn/hcnloadbalancer.go
//     LoadBalancerPortMapping), so sessionAffinityConfig.clientIP.
//     timeoutSeconds never reaches the data plane: a client stays on its
//     backend for as long as the policy lives, which kube-proxy replaces
//     when the Service's endpoints change.
//   - externalTrafficPolicy Local is implemented with DSR: winkernel's
//     newServiceInfo (proxier.go) sets localTrafficDSR from the policy and
//     clears it when hcn.DSRSupported() fails; without it the NodePort's
//     load balancer takes every endpoint, not the node's own ("Local
//     Traffic Policy in non-DSR mode" is in the docs' Limitations). HNS
//     has DSR from versions 9.3/10.2 (hcsshim hcn/hcnglobals.go
//     DSRVersion), which Windows Server 2019 has from the August 2020
//     update, build 10.0.17763.1432 (KB4571748; microsoft/
//     Windows-Containers#19, containernetworking/plugins#613,
//     projectcalico/node#1015): dsrRevision.
//   - IPv6 on overlay: kube-proxy's dual-stack check refuses an overlay
//     (VXLAN) HNS network ("Winoverlay does not support dual-stack,
//     falling back to single-stack", winkernel/supported.go
//     DualStackCompatible) and runs one proxier of the node's primary
//     family ("kube-proxy running in single-stack mode", cmd/kube-proxy/
//     app/server.go); that proxier's change trackers skip a Service
//     without a ClusterIP of its family (pkg/proxy/servicechangetracker.go)
//     and endpoints of the other family. The docs list "IPv6 communication
//     between Windows pods connected to overlay networks" as unsupported.
const (
	ws2019 = 17763
	ws2022 = 20348
	// maxDestinationsFixedRevision is the Windows Server 2019 revision
	// (17763.x) from which a load balancer takes up to 1024 destinations.
	maxDestinationsFixedRevision = 2746
	oldMaxDestinations           = 64
	maxDestinations              = 1024
	// dsrRevision is the Windows Server 2019 revision (17763.x) whose HNS
	// supports DSR.
	dsrRevision = 1432
)

type limits struct {
	windows         bool
	build, revision int
}

// limitsOf reads a node's build from its kernel version ("10.0.17763.6532").
func limitsOf(cfg NodeConfig) limits {
	l := limits{windows: cfg.Windows}
	parts := strings.Split(cfg.KernelVersion, ".")
	if len(parts) >= 3 {
		l.build, _ = strconv.Atoi(parts[2])
	}
	if len(parts) >= 4 {
		l.revision, _ = strconv.Atoi(parts[3])
	}
	return l
}

// maxDestinations is how many endpoints one load-balancer policy takes
// on this node; 0 is no limit (Linux).
func (l limits) maxDestinations() int {
	if !l.windows {
		return 0
	}
	if l.build < ws2019 || (l.build == ws2019 && l.revision < maxDestinationsFixedRevision) {
		return oldMaxDestinations
	}
	return maxDestinations
}

// loadBalancer is hcnCreateLoadBalancer's answer for a Service's policy.
func (l limits) loadBalancer(s *service) error {
	max := l.maxDestinations()
	if max == 0 || len(s.endpoints) <= max {
		return nil
	}
	return fmt.Errorf(`hcnCreateLoadBalancer failed in Win32: The parameter is incorrect. (0x57) {"Success":false,"Error":"The parameter is incorrect. Unable to initialize VFP LB rule: invalid number of destinations.","ErrorCode":2147942487} (%d endpoints; this build takes at most %d)`, len(s.endpoints), max)
}

var errHostVIP = errors.New("connect: connection timed out (a Windows Server 2019 host cannot reach Service VIPs; Windows Server 2022 and later can)")

// hostToService says whether the host itself reaches ClusterIPs.
func (l limits) hostToService() error {
	if l.windows && l.build < ws2022 {
		return errHostVIP
	}
	return nil
}

// sessionAffinity says whether ClientIP affinity is applied.
func (l limits) sessionAffinity() bool { return !l.windows || l.build >= ws2022 }

// dsr says whether HNS on this node supports Direct Server Return, which
// externalTrafficPolicy Local needs; a Linux node has no such need.
func (l limits) dsr() bool {
	return l.build > ws2019 || (l.build == ws2019 && l.revision >= dsrRevision)
}

// localTraffic says whether externalTrafficPolicy Local keeps external
// traffic on the node's own endpoints here.
func (l limits) localTraffic() bool { return !l.windows || l.dsr() }

// affinityExpires says whether ClientIP affinity ends after the Service's
// timeoutSeconds (iptables' recent match on Linux) or lasts as long as the
// load-balancer policy (HNS's source-IP distribution, which has no timeout).
func (l limits) affinityExpires() bool { return !l.windows }

// Networks as HNS names their types (Get-HnsNetwork).
const hnsOverlay = "Overlay"
