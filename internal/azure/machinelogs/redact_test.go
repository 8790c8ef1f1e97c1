package machinelogs

import (
	"strings"
	"testing"
)

// TestRedact: each kind of secret a bootstrap log carries is gone from
// the redacted text, and what is around it stays to be read.
func TestRedact(t *testing.T) {
	cases := []struct {
		name, log string
		secrets   []string
		keeps     []string
	}{
		{"bootstrap token", "kubeadm join 10.0.0.4:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
			[]string{"0123456789abcdef"}, []string{"kubeadm join 10.0.0.4:6443", "--discovery-token-ca-cert-hash sha256:0a1b"}},
		{"bootstrap token in a YAML config", "    token: 7z8y9x.q1w2e3r4t5y6u7i8\n", []string{"q1w2e3r4t5y6u7i8"}, []string{"token:"}},
		{"kubeadm prints the token", "[bootstrap-token] Using token: k0k0k0.abcdefghijklmnop", []string{"abcdefghijklmnop"}, []string{"[bootstrap-token] Using token"}},
		{"certificate key flag", "kubeadm join --control-plane --certificate-key 6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c",
			[]string{"6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"}, []string{"--certificate-key"}},
		{"certificate key in a config", `certificateKey: "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2"`,
			[]string{"a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2"}, []string{"certificateKey"}},
		{"long hex key", "encryption key 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff written",
			[]string{"00112233445566778899aabbccddeeff"}, []string{"encryption key", "written"}},
		{"SAS signature", "Downloading https://acct.blob.core.windows.net/c/k.zip?sv=2022-11-02&se=2026-12-01&sr=b&sp=r&sig=Zm9vYmFy%2BYmF6cXV4MTIz%3D done",
			[]string{"Zm9vYmFy%2BYmF6cXV4MTIz%3D"}, []string{"https://acct.blob.core.windows.net/c/k.zip?sv=2022-11-02", "done"}},
		{"connection string key", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=bXlrZXk9PQ==;EndpointSuffix=core.windows.net",
			[]string{"bXlrZXk9PQ=="}, []string{"AccountName=acct", "EndpointSuffix"}},
		{"client secret in JSON", `{"cloud": "AzurePublicCloud", "aadClientSecret": "s3cr3t~Value.x", "tenantId": "t"}`,
			[]string{"s3cr3t~Value.x"}, []string{`"aadClientSecret": "`, `"tenantId": "t"`}},
		{"password key=value", "net user capi password=Hunter2!x /add", []string{"Hunter2!x"}, []string{"net user capi", "/add"}},
		{"client_secret in a form", "POST body client_id=abc&client_secret=Qx~9.secret&grant_type=client_credentials",
			[]string{"Qx~9.secret"}, []string{"client_id=abc", "grant_type=client_credentials"}},
		{"password flag", "setup --admin-password Pa55w0rd! --user capi", []string{"Pa55w0rd!"}, []string{"--user capi"}},
		{"bearer token", "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789' https://x", []string{"abcdefghijklmnopqrstuvwxyz0123456789"}, []string{"Authorization: Bearer", "https://x"}},
		{"JWT", "token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl rejected", []string{"eyJhbGciOiJSUzI1NiJ9", "c2lnbmF0dXJl"}, []string{"rejected"}},
		{"private key", "writing key\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nQmFzZTY0IGtleQ==\n-----END RSA PRIVATE KEY-----\nkey written",
			[]string{"MIIEowIBAAKCAQEAx", "QmFzZTY0IGtleQ=="}, []string{"writing key", "key written"}},
		{"private key cut by the excerpt's start", "AAKCAQEAxyz\nQmFzZTY0IGtleQ==\n-----END PRIVATE KEY-----\nnext step",
			[]string{"AAKCAQEAxyz", "QmFzZTY0IGtleQ=="}, []string{"next step"}},
		{"private key cut by the excerpt's end", "step\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n", []string{"MHcCAQEEIB"}, []string{"step"}},
	}
	for _, c := range cases {
		got := Redact(c.log)
		for _, s := range c.secrets {
			if strings.Contains(got, s) {
				t.Errorf("%s: %q redacted is %q: still holds %q", c.name, c.log, got, s)
			}
		}
		if !strings.Contains(got, Redacted) {
			t.Errorf("%s: %q redacted is %q: no %s", c.name, c.log, got, Redacted)
		}
		for _, k := range c.keeps {
			if !strings.Contains(got, k) {
				t.Errorf("%s: %q redacted is %q: lost %q", c.name, c.log, got, k)
			}
		}
	}
	// An ordinary log stays as it was.
	plain := "error execution phase preflight: couldn't validate the identity of the API Server: Get \"https://192.0.2.10:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp 192.0.2.10:6443: i/o timeout\n" +
		"image sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9 pulled; the password is wrong"
	if got := Redact(plain); got != plain {
		t.Errorf("a log without secrets redacted:\n%s\nwant it unchanged:\n%s", got, plain)
	}
}
