package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// Exec runs a command in a container through the API server's pods/exec,
// as kubectl exec does, with stdin when it is not empty.
func Exec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, cmd []string, stdin string) (stdout, stderr string, err error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var o, e bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &o, Stderr: &e}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	return o.String(), e.String(), err
}

// PortForwardDialer is the SPDY dialer of a pod's pods/portforward.
func PortForwardDialer(cfg *rest.Config, cs kubernetes.Interface, ns, pod string) (httpstream.Dialer, error) {
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	tr, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	return spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: tr}, "POST", url), nil
}

// Get forwards a local port to the pod's port, as kubectl port-forward
// does, and GETs path through it.
func Get(cfg *rest.Config, cs kubernetes.Interface, ns, pod string, port int, path string) (*http.Response, []byte, error) {
	dialer, err := PortForwardDialer(cfg, cs, ns, pod)
	if err != nil {
		return nil, nil, err
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, nil, err
	}
	var fwErr error
	done := make(chan struct{})
	go func() { fwErr = fw.ForwardPorts(); close(done) }()
	defer func() { close(stop); <-done }()
	select {
	case <-ready:
	case <-done:
		return nil, nil, fmt.Errorf("port-forward: %w", fwErr)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}
