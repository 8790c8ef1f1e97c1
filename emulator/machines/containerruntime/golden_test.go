package containerruntime

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/internal/golden"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// startCase is one testdata/start/<case>.input.yaml: a node (OS, Windows
// build, containerd version), an image and a container spec, as the
// kubelet hands them to the runtime.
type startCase struct {
	Node struct {
		OS         string `json:"os"`
		Build      string `json:"build,omitempty"`
		Containerd string `json:"containerd"`
	} `json:"node"`
	HostProcess bool             `json:"hostProcess,omitempty"`
	Image       Image            `json:"image"`
	Container   corev1.Container `json:"container"`
	// Env is what the kubelet resolved for the container (Environment).
	Env []corev1.EnvVar `json:"env,omitempty"`
	// HostFiles are files on the node's disk (host paths) before the
	// container starts.
	HostFiles []string `json:"hostFiles,omitempty"`
}

// startResult is its <case>.output.yaml: what became of the process, and
// where it ran.
type startResult struct {
	State   string   `json:"state"`
	Code    int32    `json:"code,omitempty"`
	Message string   `json:"message,omitempty"`
	Log     []string `json:"log,omitempty"`
	// Every is how often a process that waits looks again.
	Every string `json:"every,omitempty"`
	// WorkingDir and SandboxMountPoint are a HostProcess container's,
	// as hcsshim sets them.
	WorkingDir        string `json:"workingDir,omitempty"`
	SandboxMountPoint string `json:"sandboxMountPoint,omitempty"`
}

var stateNames = map[State]string{Runs: "Runs", Exits: "Exits", Waits: "Waits", StartFails: "StartFails", Ends: "Ends"}

// TestStartGolden runs every testdata/start case through Start without a
// world (package golden: kwok's input/output files): how a command is
// resolved per containerd version and Windows build, how $(VAR) and the
// sandbox variables expand, and which working directory the process gets.
func TestStartGolden(t *testing.T) {
	golden.Run(t, "start", 10, func(t *testing.T, c *startCase) []byte {
		got, err := yaml.Marshal(runStartCase(t, *c))
		if err != nil {
			t.Fatal(err)
		}
		return got
	})
}

func runStartCase(t *testing.T, c startCase) startResult {
	windows := c.Node.OS == "windows"
	n := Node{OS: c.Node.OS, Build: c.Node.Build, Containerd: c.Node.Containerd, Disk: vmdisk.Disk{Root: t.TempDir(), Windows: windows}}
	for _, f := range c.HostFiles {
		p, err := n.Disk.HostPath(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{}
	if c.HostProcess {
		pod = hostProcessPod()
	}
	ctr := Container{ID: "c0ffee", Pod: pod, Spec: c.Container, Env: c.Env}
	o := Start(context.Background(), n, c.Image, ctr)
	r := startResult{State: stateNames[o.State], Code: o.Code, Message: o.Message, Log: o.Log}
	if o.Every > 0 {
		r.Every = o.Every.String()
	}
	if windows && c.HostProcess {
		cwd := c.Container.WorkingDir
		if cwd == "" {
			cwd = c.Image.WorkingDir
		}
		_, r.WorkingDir, r.SandboxMountPoint = HostProcess(n, c.Image, ctr, cwd)
	}
	return r
}
