package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodeaccess"
	"github.com/winkube/winkube/internal/nodessh"
	"github.com/winkube/winkube/internal/scheme"
)

// accessOptions are the flags of the commands that reach a node: where
// the management cluster is, which node, and how to log in.
type accessOptions struct {
	kubeconfig, context, namespace, cluster string
	identities                              []string
	user, knownHosts                        string
	noAgent                                 bool
	local, stateDir                         string
	// useMyAzureLogin: act with the user's own Azure login for a cluster
	// without an identityRef (only 'machine' and 'logs' register it).
	useMyAzureLogin bool
	cmd             *cobra.Command // for bad input's pointer to --help
}

const accessExamples = `  The management cluster is the current kubeconfig's (or --kubeconfig's); for a
  local world made by 'winkube up NAME', --local NAME uses its kubeconfig, SSH key
  and known-hosts file.`

func (o *accessOptions) addFlags(cmd *cobra.Command) {
	o.cmd = cmd
	cmd.ValidArgsFunction = completeNodes(o)
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "kubeconfig context to use")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the cluster's objects (default: the context's, or default)")
	f.StringVar(&o.cluster, "cluster", "", "only consider machines of this cluster (when a name matches machines of several)")
	f.StringArrayVarP(&o.identities, "identity", "i", nil, "private key file to log in with (repeatable; default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa and ssh-agent's keys)")
	f.StringVarP(&o.user, "user", "l", nodessh.DefaultUser, "user to log in as")
	f.StringVar(&o.knownHosts, "known-hosts", "", "known-hosts file winkube checks and records host keys in (default ~/.winkube/known_hosts)")
	f.BoolVar(&o.noAgent, "no-agent", false, "do not offer ssh-agent's keys")
	f.StringVar(&o.local, "local", "", "use the local world NAME made by 'winkube up NAME' (its kubeconfig, SSH key and known hosts in ~/.winkube/NAME)")
	f.StringVar(&o.stateDir, "state-dir", "", "use the local world whose state is in this directory (as --local)")
}

// validate refuses a login that cannot happen, before the management
// cluster is asked: no user, a key file that is not there, or two local
// worlds named at once (--state-dir would win silently over --local).
func (o *accessOptions) validate() error {
	if o.user == "" {
		return badInputf(nil, "--user \"\": name the user to log in as (%s on the nodes winkube bootstraps)", nodessh.DefaultUser)
	}
	for _, id := range o.identities {
		if _, err := os.Stat(id); err != nil {
			return badInputf(nil, "--identity %s: %v: give a private key file you can read", id, err)
		}
	}
	if o.local != "" && o.stateDir != "" {
		return badInputf(nil, "--local %s and --state-dir %s both name a local world: give one", o.local, o.stateDir)
	}
	return nil
}

// localWorld finds the state directory and management kubeconfig that
// --local NAME or --state-dir names; all "" when neither is set.
func localWorld(cmd *cobra.Command, local, stateDir string) (dir, mgmt string, err error) {
	if local == "" && stateDir == "" {
		return "", "", nil
	}
	if stateDir == "" {
		up := &upOptions{}
		if err := up.defaultStateDir(local); err != nil {
			return "", "", err
		}
		stateDir = up.stateDir
	}
	mgmt = filepath.Join(stateDir, localworld.ManagementKubeconfig)
	if _, err := os.Stat(mgmt); err != nil {
		flag := "--state-dir " + stateDir
		if local != "" {
			flag = "--local " + local
		}
		return "", "", badInputf(cmd, "%s: no local world in %s (%s is missing): start it with 'winkube up', or drop the flag", flag, stateDir, mgmt)
	}
	return stateDir, mgmt, nil
}

// resolveLocal fills in a local world's kubeconfig, key and known hosts.
func (o *accessOptions) resolveLocal() error {
	dir, mgmt, err := localWorld(o.cmd, o.local, o.stateDir)
	if err != nil || dir == "" {
		return err
	}
	o.stateDir = dir
	if o.kubeconfig == "" {
		o.kubeconfig = mgmt
	}
	if o.knownHosts == "" {
		o.knownHosts = filepath.Join(o.stateDir, "known_hosts")
	}
	return nil
}

func (o *accessOptions) client() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("management cluster: %w (pass --kubeconfig, or --local NAME for a local world)", err)
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	return c, ns, err
}

// signers are the keys to offer: --identity files; else the default key
// files that can be read without a passphrase, the local world's key, and
// ssh-agent's keys.
func (o *accessOptions) signers() ([]ssh.Signer, error) {
	if len(o.identities) > 0 {
		return nodessh.LoadSigners(o.identities, nil, !o.noAgent)
	}
	var defaults []string
	if o.stateDir != "" {
		defaults = append(defaults, filepath.Join(o.stateDir, localworld.SSHKeyFile))
	}
	return nodessh.LoadSigners(nil, append(defaults, nodessh.DefaultKeyFiles()...), !o.noAgent)
}

// target resolves the node and the way to log in to it.
func (o *accessOptions) target(ctx context.Context, name string, progress io.Writer) (*nodeaccess.Target, nodessh.Options, error) {
	if err := o.resolveLocal(); err != nil {
		return nil, nodessh.Options{}, err
	}
	c, ns, err := o.client()
	if err != nil {
		return nil, nodessh.Options{}, err
	}
	t, err := nodeaccess.Resolve(ctx, c, ns, name, o.cluster)
	if err != nil && o.stateDir != "" && errors.Is(err, syscall.ECONNREFUSED) {
		return nil, nodessh.Options{}, fmt.Errorf("the local world in %s is not running (start it again with 'winkube up'): %w", o.stateDir, err)
	}
	if err != nil {
		return nil, nodessh.Options{}, err
	}
	signers, err := o.signers()
	if err != nil {
		return nil, nodessh.Options{}, err
	}
	kh := o.knownHosts
	if kh == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nodessh.Options{}, errors.New("no home directory for the known-hosts file: pass --known-hosts")
		}
		kh = filepath.Join(home, ".winkube", "known_hosts")
	}
	opts := nodessh.Options{User: o.user, Signers: signers, KnownHosts: &nodessh.KnownHosts{Path: kh},
		Progress: func(s string) { fmt.Fprintln(progress, "winkube: "+s) }}
	return t, opts, nil
}

// connect resolves and connects to the node.
func (o *accessOptions) connect(ctx context.Context, name string, progress io.Writer) (*nodessh.Conn, error) {
	t, opts, err := o.target(ctx, name, progress)
	if err != nil {
		return nil, err
	}
	return nodessh.Dial(ctx, t, opts)
}

// ExitStatus is a remote command's exit status, which winkube exits with.
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// ExitCode is the status for the process to exit with.
func (e ExitStatus) ExitCode() int { return int(e) }

// oneNode wants exactly one MACHINE|NODE argument.
var oneNode = oneArg("node", "MACHINE|NODE")

// oneArg wants exactly one argument, a noun written as placeholder in the
// usage.
func oneArg(noun, placeholder string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch len(args) {
		case 1:
			return nil
		case 0:
			return fmt.Errorf("name the %s: %s %s", noun, cmd.CommandPath(), placeholder)
		}
		return fmt.Errorf("one %s at a time: %s %s (drop %s)", noun, cmd.CommandPath(), args[0], strings.Join(args[1:], " "))
	}
}
