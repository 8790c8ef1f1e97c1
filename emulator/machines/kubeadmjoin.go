package machines

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/winkube/winkube/emulator/machines/bootagent"
	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/join"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// kubeadm join's output and failures follow kubeadm v1.36:
// cmd/kubeadm/app/cmd/phases/join/kubelet.go
// (kubernetes/kubernetes@00966a5a6ce164aee5caa9b176b65d22fda3d565) for the
// kubelet-start phase and its failure message, cmd/kubeadm/app/util/apiclient
// wait.go for [kubelet-check], cmd/kubeadm/app/discovery (discovery.go
// wraps discovery's error as "couldn't validate the identity of the API
// Server", in the preflight phase) and the workflow runner's "error
// execution phase <phase>: " prefix.

// joined is what a successful kubeadm join leaves for the kubelet.
type joined struct {
	cfg *rest.Config
	reg bootdata.NodeRegistration
}

// kubeadmJoin is the kubeadm the machine's boot script runs. Its outcome
// is kept in *out and *failed for the runtime.
func (r *Runtime) kubeadmJoin(m *machine, out *joined, failed *error) bootagent.Kubeadm {
	return func(ctx context.Context, args []string, print func(string)) int {
		err := r.runKubeadmJoin(ctx, m, args, print, out)
		if err != nil {
			print(err.Error())
			print("To see the stack trace of this error execute with --v=5 or higher")
			*failed = fmt.Errorf("kubeadm join: %s", strings.SplitN(err.Error(), "\n", 2)[0])
			return 1
		}
		return 0
	}
}

func (r *Runtime) runKubeadmJoin(ctx context.Context, m *machine, args []string, print func(string), out *joined) error {
	if len(args) == 0 || args[0] != "join" {
		return fmt.Errorf("winkube's machine runtime runs kubeadm join on workers, not kubeadm %s", strings.Join(args, " "))
	}
	cfgPath := ""
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			cfgPath = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	disk := m.disk("")
	p, err := disk.HostPath(cfgPath)
	if err != nil {
		return err
	}
	// kubeadm reads its configuration from the disk, where write_files put
	// it (or did not).
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("unable to read config from %q : open %s: %s", cfgPath, cfgPath, noSuchFile(m.windows()))
	}
	k, err := bootdata.ParseKubeadm(data)
	if err != nil || k.Join == nil {
		return fmt.Errorf("unable to read config from %q : no JoinConfiguration", cfgPath)
	}
	j := k.Join
	j.NodeRegistration.Name = nodeName(j.NodeRegistration, m.arm.ComputerName)
	bt := j.Discovery.BootstrapToken
	if bt == nil {
		return errors.New("JoinConfiguration has no bootstrapToken discovery: file discovery is not supported by winkube's machine runtime")
	}
	// As in handHost.KubeadmJoin: others read these under r.mu.
	r.mu.Lock()
	m.nodeName, m.endpoint = j.NodeRegistration.Name, bt.APIServerEndpoint
	r.mu.Unlock()
	cfg, err := r.joinPhases(ctx, m, joinRun{
		disc: join.Discovery{Endpoint: bt.APIServerEndpoint, Token: bt.Token, CACertHashes: bt.CACertHashes, UnsafeSkipCAVerification: bt.UnsafeSkipCAVerification},
		reg:  j.NodeRegistration, criErr: criDialError(j.NodeRegistration.CRISocket, m.windows()),
		discoveryTimeout: timeoutOr(j.Timeouts.Discovery, r.opts.JoinTimeout), healthTimeout: timeoutOr(j.Timeouts.KubeletHealthCheck, r.opts.KubeletHealthCheckTimeout),
		kubeletVersion: kubeletVersionOf(m.arm.Image),
	}, print)
	if err != nil {
		return err
	}
	out.cfg, out.reg = cfg, j.NodeRegistration
	return nil
}

// joinRun is one kubeadm join's inputs once its configuration is read.
type joinRun struct {
	disc join.Discovery
	reg  bootdata.NodeRegistration
	// criErr is why the kubelet cannot reach the container runtime ("":
	// it can).
	criErr                          string
	discoveryTimeout, healthTimeout time.Duration
	// kubeletVersion is the installed kubelet's; "": the cluster's.
	kubeletVersion string
	// noKubeletService: no kubelet service is registered for kubeadm to
	// start (a machine joined by hand whose script did not register one).
	noKubeletService bool
}

// joinPhases are kubeadm join's preflight, discovery, kubelet-start and
// TLS bootstrap; it returns the node's credentials, written to the
// machine's kubelet.conf.
func (r *Runtime) joinPhases(ctx context.Context, m *machine, jr joinRun, print func(string)) (*rest.Config, error) {
	bt := jr.disc
	print("[preflight] Running pre-flight checks")
	// kubeadm's preflight only warns when it cannot reach the runtime; the
	// kubelet is the one that stops on it.
	criErr := jr.criErr
	if criErr != "" {
		print("[preflight] WARNING: Couldn't create the interface used for talking to the container runtime: failed to create new CRI runtime service: " + criErr)
	}
	r.event(m, "discovering the cluster at "+bt.Endpoint)
	dctx, cancel := context.WithTimeout(ctx, jr.discoveryTimeout)
	defer cancel()
	cl, err := join.Discover(dctx, bt)
	if err != nil {
		return nil, fmt.Errorf("error execution phase preflight: couldn't validate the identity of the API Server: %w", err)
	}
	print("[kubelet-start] Writing kubelet configuration to file \"" + kubeletFile(m.windows(), "config.yaml") + "\"")
	print("[kubelet-start] Writing kubelet environment file with flags to file \"" + kubeletFile(m.windows(), "kubeadm-flags.env") + "\"")
	print("[kubelet-start] Starting the kubelet")
	if jr.noKubeletService {
		// kubeadm's TryStartKubelet (cmd/kubeadm/app/phases/kubelet/kubelet.go,
		// kubernetes/kubernetes@0553521df1be9f2be248577fdd77f787acba353d)
		// through Windows' service manager (pkg/util/initsystem/initsystem_windows.go,
		// @5d1409a4bf6f2fd9c55627095e26f16513c75a06): it only warns, and
		// then waits for a kubelet that nothing starts.
		print("[kubelet-start] couldn't detect a kubelet service, can't make sure the kubelet is running properly.")
		print("[kubelet-start] WARNING: unable to start the kubelet service: [couldn't stop service kubelet: could not access service kubelet: The specified service does not exist as an installed service.]")
		print("[kubelet-start] Please ensure kubelet is reloaded and running manually.")
	}
	kubeletVersion := jr.kubeletVersion
	if kubeletVersion == "" {
		kubeletVersion = serverVersion(&rest.Config{Host: cl.Server, BearerToken: bt.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cl.CAData}, Timeout: 10 * time.Second})
	}
	exit := ""
	if flag := unknownKubeletFlag(jr.reg, kubeletVersion); flag != "" {
		exit = "failed to parse kubelet flag: unknown flag: " + flag
	} else if criErr != "" {
		exit = "failed to run Kubelet: " + criErr
	}
	timeout := jr.healthTimeout
	print(fmt.Sprintf("[kubelet-check] Waiting for a healthy kubelet at http://127.0.0.1:10248/healthz. This can take up to %v", timeout))
	if exit != "" || jr.noKubeletService {
		// The kubelet exits at once (component-base/cli/run.go logs the
		// failed command); its service restarts it and it exits again,
		// while kubeadm waits for its health endpoint to the end. Without
		// a service no kubelet runs, and none logs.
		if exit != "" {
			m.logs.Write(vmdisk.Kubelet, "E%s run.go:72] \"command failed\" err=%q", time.Now().UTC().Format("0102 15:04:05.000000"), exit)
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(timeout):
		}
		print(fmt.Sprintf("[kubelet-check] The kubelet is not healthy after %v", time.Since(start)))
		healthz := "The HTTP call equal to 'curl -sSL http://127.0.0.1:10248/healthz' returned error: Get \"http://127.0.0.1:10248/healthz\": dial tcp 127.0.0.1:10248: connect: connection refused"
		for _, l := range strings.Split(kubeadmJoinFailMsg(healthz, m.windows()), "\n") {
			print(l)
		}
		return nil, fmt.Errorf("error execution phase kubelet-start: %s", healthz)
	}
	print("[kubelet-check] The kubelet is healthy after 501.2ms")
	print("[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap")
	r.event(m, "requesting the node's client certificate (TLS bootstrap)")
	creds, err := join.Bootstrap(dctx, cl, bt.Token, m.nodeName)
	if err != nil {
		return nil, fmt.Errorf("error execution phase kubelet-start: %w", err)
	}
	if err := creds.WriteKubeconfig(filepath.Join(m.dir, "root", "etc", "kubernetes", "kubelet.conf"), cl, m.nodeName); err != nil {
		return nil, err
	}
	print("")
	print("This node has joined the cluster:")
	print("* Certificate signing request was sent to apiserver and a response was received.")
	print("* The Kubelet was informed of the new secure connection details.")
	return creds.Config(cl), nil
}

// kubeadmJoinFailMsg is kubeadm's message when the kubelet does not come
// up (phases/join/kubelet.go); it names systemd's tools on every OS.
func kubeadmJoinFailMsg(err string, _ bool) string {
	return "\nUnfortunately, an error has occurred:\n\t" + err + "\n\nThis error is likely caused by:\n" +
		"\t- The kubelet is not running\n\t- The kubelet is unhealthy due to a misconfiguration of the node in some way (required cgroups disabled)\n\n" +
		"If you are on a systemd-powered system, you can try to troubleshoot the error with the following commands:\n" +
		"\t- 'systemctl status kubelet'\n\t- 'journalctl -xeu kubelet'\n"
}

// timeoutOr is a kubeadm configuration's timeout, or the runtime's.
func timeoutOr(s string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return def
}

func kubeletFile(windows bool, name string) string {
	if windows {
		return `C:\var\lib\kubelet\` + name
	}
	return "/var/lib/kubelet/" + name
}

func noSuchFile(windows bool) string {
	if windows {
		return "The system cannot find the path specified."
	}
	return "no such file or directory"
}

// serverVersion is the cluster's version, which the node image's kubelet
// has when the image does not say.
func serverVersion(cfg *rest.Config) string {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		return ""
	}
	return v.GitVersion
}
