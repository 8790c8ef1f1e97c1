package machines

import (
	"context"
	"errors"
	"net"
)

// DialFromNode connects from a node as its shell's curl does.
func (r *Runtime) DialFromNode(ctx context.Context, nodeName, addr string) (net.Conn, error) {
	r.mu.Lock()
	var m *machine
	for _, x := range r.machines {
		if x.nodeName == nodeName {
			m = x
		}
	}
	r.mu.Unlock()
	if m == nil {
		return nil, errors.New("no machine runs node " + nodeName)
	}
	return r.nodeDial(m)(ctx, addr)
}

// ServiceAccountConfig is how a modelled process reaches the API server.
var ServiceAccountConfig = serviceAccountConfig

// MetricsServerStart is what metrics-server does with its flags as it starts.
var MetricsServerStart = metricsServerStart

// AzureDiskProxyCheck is azureDiskProxyCheck, for its test.
var AzureDiskProxyCheck = azureDiskProxyCheck
