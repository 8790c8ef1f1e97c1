package process

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

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
	// WorkingDir and SandboxMountPoint are a HostProcess container's,
	// as hcsshim sets them.
	WorkingDir        string `json:"workingDir,omitempty"`
	SandboxMountPoint string `json:"sandboxMountPoint,omitempty"`
}

var stateNames = map[State]string{Runs: "Runs", Exits: "Exits", Waits: "Waits", StartFails: "StartFails", Ends: "Ends"}

// TestStartGolden runs every testdata/start case through Start without a
// world, in kwok's golden style (a <case>.input.yaml beside its
// <case>.output.yaml, as kubernetes-sigs/kwok
// kustomize/stage/pod/general/testdata/pod-create.input.yaml and
// .output.yaml, 8ca8488a): how a command is resolved per containerd
// version and Windows build, how $(VAR) and the sandbox variables expand,
// and which working directory the process gets. `go test -run
// TestStartGolden -update` rewrites the outputs; review their diff.
func TestStartGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "start", "*.input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 10 {
		t.Fatalf("found %d cases in testdata/start; the golden files are missing", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var c startCase
			if err := yaml.UnmarshalStrict(raw, &c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			got, err := yaml.Marshal(runStartCase(t, c))
			if err != nil {
				t.Fatal(err)
			}
			out := strings.TrimSuffix(in, ".input.yaml") + ".output.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, out, got, want)
			}
		})
	}
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
	if windows && c.HostProcess {
		cwd := c.Container.WorkingDir
		if cwd == "" {
			cwd = c.Image.WorkingDir
		}
		_, r.WorkingDir, r.SandboxMountPoint = HostProcess(n, c.Image, ctr, cwd)
	}
	return r
}
