package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component running from bin/.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(name, bin string, args []string, logDir string) (*process, error) {
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and killed with winkube: nothing outlives the
	// emulator, even when winkube itself is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports an early exit, with the tail of the log to say why.
func (p *process) exited(logDir string) error {
	select {
	case <-p.done:
		b, _ := os.ReadFile(filepath.Join(logDir, p.name+".log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, strings.Join(lines, "\n"))
	default:
		return nil
	}
}

func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
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
