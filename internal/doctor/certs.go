package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/util/certs"
)

// Certificates reports the workload API server's serving certificate (read
// in a TLS handshake) and the kubeconfig's client certificate when they
// expire within warnWithin, or have expired.
func Certificates(ctx context.Context, cfg *rest.Config, now time.Time, warnWithin time.Duration) []Finding {
	if cfg == nil {
		return nil
	}
	var out []Finding
	serving, err := servingCertificate(ctx, cfg.Host)
	if err != nil {
		out = append(out, Finding{Check: "certificates", Severity: Warning, Object: cfg.Host,
			Message: fmt.Sprintf("could not read the API server's serving certificate: %v", err),
			Fix:     "check that the API server is reachable from here"})
	} else {
		out = append(out, judge("the API server's serving certificate", cfg.Host, serving, now, warnWithin,
			"renew it on every control-plane node ('kubeadm certs renew apiserver', then restart kube-apiserver), or let Cluster API roll the control plane: KubeadmControlPlane spec.rolloutBefore.certificatesExpiryDays")...)
	}
	client, err := clientCertificate(cfg)
	if err != nil {
		out = append(out, Finding{Check: "certificates", Severity: Warning, Message: "the kubeconfig's client certificate cannot be read: " + err.Error()})
	} else if client != nil {
		out = append(out, judge("the kubeconfig's client certificate", "CN="+client.Subject.CommonName, client, now, warnWithin,
			"get a new kubeconfig: Cluster API rotates the <cluster>-kubeconfig Secret in the management cluster ('clusterctl get kubeconfig NAME'); for a local world, 'winkube up' writes it again")...)
	}
	return out
}

func judge(what, object string, c *x509.Certificate, now time.Time, warnWithin time.Duration, fix string) []Finding {
	left := c.NotAfter.Sub(now)
	switch {
	case left <= 0:
		return []Finding{{Check: "certificates", Severity: Error, Object: object,
			Message: fmt.Sprintf("%s expired on %s", what, c.NotAfter.UTC().Format(time.RFC3339)), Fix: fix}}
	case left < warnWithin:
		return []Finding{{Check: "certificates", Severity: Warning, Object: object,
			Message: fmt.Sprintf("%s expires on %s, in %s", what, c.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Minute)), Fix: fix}}
	}
	return nil
}

// servingCertificate reads the leaf certificate a TLS server presents.
// It does not verify it: expiry is what is asked, and an expired
// certificate would fail verification. client-go's
// cert.GetServingCertificates does the same without a context or a dial
// timeout, so a doctor run against an unreachable host would hang.
func servingCertificate(ctx context.Context, host string) (*x509.Certificate, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("%s is not served over HTTPS", host)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // reads the certificate's dates only
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	peer := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(peer) == 0 {
		return nil, fmt.Errorf("%s presented no certificate", addr)
	}
	return peer[0], nil
}

func clientCertificate(cfg *rest.Config) (*x509.Certificate, error) {
	data := cfg.TLSClientConfig.CertData
	if len(data) == 0 && cfg.TLSClientConfig.CertFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.TLSClientConfig.CertFile); err != nil {
			return nil, err
		}
	}
	if len(data) == 0 {
		return nil, nil // token or exec credentials
	}
	return certs.DecodeCertPEM(data)
}
