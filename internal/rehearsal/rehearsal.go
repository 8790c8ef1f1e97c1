// Package rehearsal breaks a machine's bootstrap on purpose, so a team
// can practise diagnosing a node that does not join (issue 35). It only
// changes the machine's inputs — its KubeadmConfigSpec — and never its
// outcome: what happens next is what cloud-init or cloudbase-init and
// kubeadm do with that input, in the local world as on Azure.
package rehearsal

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
)

// Class is a way a bootstrap fails.
type Class string

// The classes of issue 35. What each leads to:
//   - PreKubeadmCommand: a preKubeadmCommands line runs a script that is
//     not on the machine and ends the script on failure ("|| exit 1").
//     Neither agent stops on a failing line by itself (cloud-init runs
//     runcmd as a plain sh script, cloudbase-init as a cmd script), so
//     without the exit kubeadm join would still run. The node never joins.
//   - MalformedFile: a file whose base64 content does not decode. cloud-init's
//     write_files stops at it, so Cluster API's kubeadm configuration
//     (written after the user's files) is missing and kubeadm join fails.
//     cloudbase-init logs "Fail to decode base64 content." and writes the
//     file undecoded: a Windows node still joins unless something reads
//     that file during the boot.
//   - MissingAzureJSON: the azure.json file is dropped. On a worker,
//     nothing of winkube's flavors or CAPZ's templates reads it during the
//     bootstrap (the cloud node manager uses the instance metadata): the
//     node joins; the cloud-controller-manager of a control-plane machine
//     without it fails.
//   - ExpiredToken: discovery uses a bootstrap token that expired (see
//     TokenSecret); kubeadm waits for its signature until its discovery
//     timeout.
//   - WrongCAHash: discovery pins a CA public key the cluster does not have.
//   - UnreachableEndpoint: discovery targets an address nothing answers
//     (192.0.2.10, TEST-NET-1, never routed); kubeadm retries until its
//     discovery timeout.
//   - UnknownKubeletFlag: the kubelet gets --azure-container-registry-config,
//     removed in Kubernetes 1.30; the kubelet exits and kubeadm's
//     kubelet-check times out.
//   - WrongCRISocket: the kubelet is pointed at a container runtime
//     endpoint the image does not serve; the kubelet exits on it.
const (
	PreKubeadmCommand   Class = "prekubeadm-command"
	MalformedFile       Class = "malformed-file"
	MissingAzureJSON    Class = "missing-azure-json"
	ExpiredToken        Class = "expired-token"
	WrongCAHash         Class = "wrong-ca-hash"
	UnreachableEndpoint Class = "unreachable-endpoint"
	UnknownKubeletFlag  Class = "unknown-kubelet-flag"
	WrongCRISocket      Class = "wrong-cri-socket"
)

// Classes lists every class.
var Classes = []Class{PreKubeadmCommand, MalformedFile, MissingAzureJSON, ExpiredToken, WrongCAHash, UnreachableEndpoint, UnknownKubeletFlag, WrongCRISocket}

// Options say what a class needs beyond the spec.
type Options struct {
	// Windows: the machine runs Windows (paths, shells, sockets).
	Windows bool
	// Token is ExpiredToken's "id.secret", issued with TokenSecret.
	Token string
	// Discovery and KubeletHealthCheck, when set, become the join
	// configuration's kubeadm timeouts, so a rehearsal fails in the time
	// a team wants to wait rather than kubeadm's 5m and 4m.
	Discovery, KubeletHealthCheck time.Duration
}

// UnreachableAddress is where UnreachableEndpoint points discovery.
const UnreachableAddress = "192.0.2.10:6443"

// Break changes spec so that a machine bootstrapped from it fails as
// class does.
func Break(spec *bootstrapv1.KubeadmConfigSpec, class Class, o Options) error {
	j := &spec.JoinConfiguration
	if s := int32(o.Discovery.Seconds()); s > 0 {
		j.Timeouts.DiscoverySeconds = &s
	}
	if s := int32(o.KubeletHealthCheck.Seconds()); s > 0 {
		j.Timeouts.KubeletHealthCheckSeconds = &s
	}
	switch class {
	case PreKubeadmCommand:
		cmd := "bash /opt/winkube/rehearsal/prepare-node.sh || exit 1"
		if o.Windows {
			cmd = "powershell -ExecutionPolicy Bypass -File C:/k/rehearsal/prepare-node.ps1 || exit 1"
		}
		spec.PreKubeadmCommands = append(spec.PreKubeadmCommands, cmd)
	case MalformedFile:
		path := "/etc/kubernetes/rehearsal.conf"
		if o.Windows {
			path = "C:/k/rehearsal.conf"
		}
		// Nine base64 characters: one more than a multiple of four, which
		// no base64 decoder accepts.
		spec.Files = append(spec.Files, bootstrapv1.File{Path: path, Encoding: bootstrapv1.Base64, Content: "bm90YmFzZ"})
	case MissingAzureJSON:
		kept := spec.Files[:0]
		for _, f := range spec.Files {
			if !strings.HasSuffix(strings.ToLower(f.Path), "azure.json") {
				kept = append(kept, f)
			}
		}
		if len(kept) == len(spec.Files) {
			return fmt.Errorf("the bootstrap config writes no azure.json")
		}
		spec.Files = kept
	case ExpiredToken:
		if o.Token == "" {
			return fmt.Errorf("%s needs a token issued with TokenSecret", class)
		}
		discovery(j).Token = o.Token
	case WrongCAHash:
		discovery(j).CACertHashes = []string{"sha256:" + strings.Repeat("0e", 32)}
	case UnreachableEndpoint:
		discovery(j).APIServerEndpoint = UnreachableAddress
	case UnknownKubeletFlag:
		path := "/etc/kubernetes/azure.json"
		if o.Windows {
			path = "c:/k/azure.json"
		}
		j.NodeRegistration.KubeletExtraArgs = append(j.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: "azure-container-registry-config", Value: &path})
	case WrongCRISocket:
		j.NodeRegistration.CRISocket = "unix:///var/run/crio/crio.sock"
		if o.Windows {
			j.NodeRegistration.CRISocket = "npipe:////./pipe/containerd"
		}
	default:
		return fmt.Errorf("unknown rehearsal class %q (one of %v)", class, Classes)
	}
	return nil
}

// discovery is the join's bootstrap-token discovery; Cluster API fills in
// what is left empty (the token, the CA hash, the endpoint).
func discovery(j *bootstrapv1.JoinConfiguration) *bootstrapv1.BootstrapTokenDiscovery {
	return &j.Discovery.BootstrapToken
}

// TokenSecret is a bootstrap token as kubeadm stores it
// (kube-system/bootstrap-token-<id>, type bootstrap.kubernetes.io/token)
// that expires at expires. Created in the workload cluster with an
// expiration that passes before the machine boots, the controller
// manager's token cleaner deletes it and the bootstrap signer never
// signs cluster-info with it: the real expired-token path.
func TokenSecret(id, secret string, expires time.Time) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret, "expiration": expires.UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
		},
	}
}
