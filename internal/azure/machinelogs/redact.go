package machinelogs

import "regexp"

// Redacted replaces what Redact removes.
const Redacted = "[REDACTED]"

// redactions are the secrets a bootstrap log carries, each with what keeps
// a line readable once it is gone. A machine's conditions and Events are
// read by anyone who may read the AzureMachine or the namespace's Events,
// while the log holds what joins a node to the cluster or reaches its
// storage: kubeadm prints its join command (bootstrap token, and for a
// control plane the certificate key that decrypts the cluster's
// certificates in the kubeadm-certs Secret), scripts echo download URLs
// with SAS signatures, the cloud config holds a client secret.
var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	// A PEM private key, whole or cut at either end by the excerpt.
	{regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`), "-----" + Redacted + " PRIVATE KEY-----"},
	{regexp.MustCompile(`(?s)\A.*?-----END [A-Z0-9 ]*PRIVATE KEY-----`), "-----" + Redacted + " PRIVATE KEY-----"},
	// A JSON web token (a service account's, Entra ID's access tokens).
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`), Redacted},
	// An Authorization header's credential.
	{regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + Redacted},
	// A SAS signature, in a URL or a connection string.
	{regexp.MustCompile(`(?i)([?&;]sig=)[^&\s"';]+`), "${1}" + Redacted},
	// A kubeadm bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}: its id names
	// it (kubeadm token list shows it), the rest is the secret.
	{regexp.MustCompile(`\b([a-z0-9]{6})\.[a-z0-9]{16}\b`), "${1}." + Redacted},
	// A secret by its name: key=value, key: value, "key": "value"; the
	// names of Azure's cloud config and connection strings among them
	// (aadClientSecret, AccountKey).
	{regexp.MustCompile(`(?i)("?[a-z0-9_.-]*(secret|password|passwd|pwd|token|accountkey|access[_-]?key|api[_-]?key|certificate[_-]?key|credential)s?"?)([ \t]*[:=][ \t]*)("?)([^\s"',;&}]+)`), "${1}${3}${4}" + Redacted},
	// ... and a flag followed by its value: --token X, --certificate-key X.
	{regexp.MustCompile(`(?i)(--[a-z0-9-]*(secret|password|token|certificate-key|access-key|api-key)[ \t]+)([^\s-]\S*)`), "${1}" + Redacted},
	// Any other long hex string (32 bytes of key material and more): a
	// certificate key given some other way, an encryption key. A digest
	// (sha256:...) names an image or a CA's public key and stays.
	{regexp.MustCompile(`(^|[^0-9A-Za-z:])[0-9a-fA-F]{32,}\b`), "${1}" + Redacted},
}

// Redact removes from a log what must not leave the machine: kubeadm
// bootstrap tokens, certificate keys and other long hex keys, SAS
// signatures, secrets and passwords named as such, private keys, bearer
// tokens and JWTs. Redact the whole log before cutting an excerpt of it,
// so a private key's lines are recognized by the lines around them.
func Redact(log string) string {
	for _, r := range redactions {
		log = r.re.ReplaceAllString(log, r.with)
	}
	return log
}
