package testenv

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIRequests is how many requests of verb (as the API server's metric
// names it: GET, LIST, PATCH, ...) to resource, not to a subresource, the
// API server at cfg has answered, by its own apiserver_request_total: what
// every client of that API server (webhooks included) sent.
func APIRequests(ctx context.Context, tb testing.TB, cfg *rest.Config, verb, resource string) int {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) ||
			!strings.Contains(line, `verb="`+verb+`"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			tb.Fatalf("%q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
