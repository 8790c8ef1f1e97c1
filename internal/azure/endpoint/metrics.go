package endpoint

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// Requests counts ARM calls by resource kind, HTTP method and status code.
// Register it with a Prometheus registry (the manager registers it with
// controller-runtime's) to see what reconciling costs in Azure calls.
var Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "winkube_arm_requests_total",
	Help: "Azure Resource Manager requests made, by resource kind, method and status code.",
}, []string{"kind", "method", "code"})

// countingPolicy counts every try, retries included, as ARM sees them.
type countingPolicy struct{}

func (countingPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	code := "error"
	if resp != nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	raw := req.Raw()
	Requests.WithLabelValues(Kind(raw.URL.Path), raw.Method, code).Inc()
	return resp, err
}

// Kind is the resource kind an ARM path addresses: the type segment after
// the provider namespace (virtualMachines, subnets, ...), resourceGroups, or
// operations for a poll.
func Kind(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for i := len(seg) - 1; i >= 0; i-- {
		if s := strings.ToLower(seg[i]); s == "operations" || s == "operationresults" {
			return "operations"
		}
	}
	kind := "other"
	for i := 0; i < len(seg); i++ {
		if strings.EqualFold(seg[i], "resourceGroups") && i+2 >= len(seg) {
			return "resourceGroups"
		}
		if strings.EqualFold(seg[i], "providers") && i+2 < len(seg) {
			// The last type of the path: .../virtualNetworks/V/subnets/S -> subnets.
			for j := i + 2; j < len(seg); j += 2 {
				kind = seg[j]
			}
			return kind
		}
	}
	return kind
}
