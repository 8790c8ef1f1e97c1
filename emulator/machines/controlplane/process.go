package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/winkube/winkube/emulator/machines/hostproc"
)

// Process is one control-plane component running from bin/, the
// process behind its static pod's container: the node's kubelet waits on
// it and restarts it when it exits, as a kubelet restarts a static pod's
// container.
type Process struct {
	name   string
	bin    string
	args   []string
	logDir string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	stopped bool
}

func start(name, bin string, args []string, logDir string) (*Process, error) {
	p := &Process{name: name, bin: bin, args: args, logDir: logDir}
	if err := p.run(); err != nil {
		return nil, err
	}
	return p, nil
}

// run starts the process; the caller holds no lock.
func (p *Process) run() error {
	logf, err := os.OpenFile(filepath.Join(p.logDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = hostproc.Env()
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and killed with winkube: nothing outlives the
	// emulator, even when winkube itself is killed.
	cmd.SysProcAttr = hostproc.Attr()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		logf.Close()
		return fmt.Errorf("start %s: the machine is stopping", p.name)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Wait blocks until the process exits (ok) or ctx ends. It returns the
// exit code (128+signal for a killed process, as a container runtime
// reports it) and the last lines of its log, which a kubelet puts in the
// terminated state's message for FallbackToLogsOnError.
func (p *Process) Wait(ctx context.Context) (code int, tail string, ok bool) {
	_, done := p.current()
	select {
	case <-ctx.Done():
		return 0, "", false
	case <-done:
	}
	p.mu.Lock()
	stopped, cmd := p.stopped, p.cmd
	p.mu.Unlock()
	if stopped {
		return 0, "", false
	}
	return exitCode(cmd), p.tail(), true
}

// Restart starts the process again after it exited.
func (p *Process) Restart() error {
	if _, done := p.current(); done != nil {
		select {
		case <-done:
		default:
			return fmt.Errorf("%s is running", p.name)
		}
	}
	return p.run()
}

func exitCode(cmd *exec.Cmd) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// tail is the end of the process's log: at most 80 lines and 2048 bytes,
// the kubelet's limits for a termination message taken from logs.
func (p *Process) tail() string {
	b, _ := os.ReadFile(filepath.Join(p.logDir, p.name+".log"))
	if len(b) > 2048 {
		b = b[len(b)-2048:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// exited reports an early exit, with the tail of the log to say why.
func (p *Process) exited() error {
	_, done := p.current()
	select {
	case <-done:
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		lines := strings.Split(p.tail(), "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		return fmt.Errorf("%s exited (%v): %s", p.name, err, strings.Join(lines, "\n"))
	default:
		return nil
	}
}

// Pid is the running process's ID.
func (p *Process) Pid() int {
	cmd, _ := p.current()
	return cmd.Process.Pid
}

// Kill stops the running process as the kubelet stops a container: a
// SIGTERM to its process group. The process may be restarted.
func (p *Process) Kill() {
	cmd, done := p.current()
	select {
	case <-done:
	default:
		hostproc.Terminate(cmd.Process)
	}
}

// stop ends the process for good: the kubelet no longer restarts it.
func (p *Process) stop() {
	p.mu.Lock()
	p.stopped = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	hostproc.Terminate(cmd.Process)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		hostproc.Kill(cmd.Process)
		<-done
	}
}

// flags renders kubeadm-style defaults overridden by the configuration's
// extraArgs, sorted as kubeadm writes them.
func flags(defaults map[string]string, extra []arg) []string {
	m := map[string]string{}
	for k, v := range defaults {
		m[k] = v
	}
	for _, a := range extra {
		m[a.name] = a.value
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, "--"+k+"="+m[k])
	}
	return out
}

type arg struct{ name, value string }
