package localworld

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/winkube/winkube/emulator/machines/hostproc"
)

// dieWithWinkube writes, for each of names in bin, a launcher into dir that
// starts it under setpriv --pdeathsig KILL, and returns the launchers'
// paths. envtest starts the management plane's etcd and kube-apiserver in
// process groups of their own and with no death signal, so a winkube killed
// with SIGKILL (or by the OOM killer) would leave them holding the world's
// ports and its etcd data, and the next 'winkube up' of the world would
// find its data directory in use. The kernel sends the signal when the
// thread that started the process exits; setpriv (util-linux, on every
// Debian system) sets it and then becomes the binary, so envtest still
// stops the process by its pid as before.
func dieWithWinkube(dir, bin string, names ...string) (map[string]string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("setpriv (util-linux) is not on PATH: without it the management plane would outlive a killed winkube: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		target, err := filepath.Abs(filepath.Join(bin, name))
		if err != nil {
			return nil, err
		}
		launcher := filepath.Join(dir, name)
		// envtest starts it with winkube's environment; GOGC is the
		// collector's target the world's Go programs run with
		// (hostproc.GCPercent), unless the user set one.
		script := fmt.Sprintf("#!/bin/sh\n: \"${GOGC=%d}\"\nexport GOGC\nexec %s --pdeathsig KILL -- %s \"$@\"\n", hostproc.GCPercent, setpriv, target)
		if err := os.WriteFile(launcher, []byte(script), 0o700); err != nil {
			return nil, err
		}
		out[name] = launcher
	}
	return out, nil
}
