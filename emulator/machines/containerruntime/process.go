// Package containerruntime starts a simulated container's process the way
// containerd (and hcsshim, for a Windows HostProcess container) starts a
// real one, and carries out what the upstream programs of the system
// add-ons do once they run: which file a command line names, in which
// directory, with which environment and which files in view, and what the
// program then needs and changes on the node (a CNI configuration, an HNS
// network). A setting is never checked for being present: a command that
// names a script fails because a script is not an executable, a module is
// missing because the working directory is not where the script looks.
//
// The rules are cited where they are implemented; the upstream images'
// configurations (Entrypoint, Cmd, WorkingDir, Env, files) are data in
// emulator/registry's catalog. What no rule here knows runs as before:
// a container whose image carries no configuration runs no process.
package containerruntime

import (
	"context"
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Image is what an image's config says of its process, and the files the
// image holds (absolute paths with forward slashes, "/kube-proxy/start.ps1").
type Image struct {
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	Env        []string
	// User is the image's USER ("" when it names none).
	User  string
	Files []string
}

// Node is what a process sees of the machine it runs on.
type Node struct {
	Name string
	OS   string
	// Build is a Windows host's build ("10.0.20348.2849" or "10.0.20348").
	Build string
	// Containerd is the node's containerd version ("1.7.24").
	Containerd string
	Disk       vmdisk.Disk
	// Dial connects from the host's network namespace, as a process on
	// the host (or in a host-network pod) does.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// HNS is the Windows host's Host Networking Service; nil on Linux.
	HNS HNS
}

// HNS is the part of Windows' Host Networking Service the CNI and
// kube-proxy use.
type HNS interface {
	// Network says whether an HNS network of that name exists, and its
	// type (Overlay, L2Bridge).
	Network(name string) (typ string, ok bool)
	CreateNetwork(name, typ string)
}

// Mount is a container's volume mount, resolved by the kubelet.
type Mount struct {
	// At is the mount path as the pod spec writes it.
	At string
	// HostDir is the node's directory behind a hostPath volume; Files
	// the content of any other volume (keys of a ConfigMap or Secret, a
	// token), relative to At.
	HostDir  string
	Files    map[string][]byte
	ReadOnly bool
}

// Container is one container to start.
type Container struct {
	// ID is the runtime's container ID (the sandbox directory's name
	// where it has one).
	ID   string
	Pod  *corev1.Pod
	Spec corev1.Container
	// Env is the environment the kubelet hands the runtime (the pod
	// spec's, with the Service variables), before the image's ENV.
	Env    []corev1.EnvVar
	Mounts []Mount
	// Memory is what the process kept when it last waited
	// (Outcome.Memory): the kubelet looks at a waiting process again by
	// starting its model over with it.
	Memory any
}

// State is what became of the process.
type State int

const (
	// Runs: the process runs (a main container) or ran to completion
	// with exit code 0 (an init container).
	Runs State = iota
	// Exits: the process ended with Code (non-zero).
	Exits
	// Waits: the process runs but waits for something that is not
	// there yet; it is looked at again later.
	Waits
	// StartFails: the runtime could not start the process at all.
	StartFails
	// Ends: the process ran and ended by itself with Code, zero or
	// not, as a command that completes does (cmd /c exit 3).
	Ends
	// Pauses: the process runs until it is stopped, whatever the pod's
	// restartPolicy (pause.exe sleeps until it is killed).
	Pauses
)

// Outcome is what starting a container came to.
type Outcome struct {
	State   State
	Code    int32
	Message string
	// Log is what the process wrote to its output.
	Log []string
	// Every is how often a process that Waits looks again for what it
	// waits for (its script's sleep); zero leaves it to the runtime.
	Every time.Duration
	// Memory is what a process that Waits holds until its next look (a
	// connect in progress), handed back then as Container.Memory.
	Memory any
}

func exits(code int32, format string, a ...any) Outcome {
	return Outcome{State: Exits, Code: code, Message: fmt.Sprintf(format, a...)}
}

func ends(code int32) Outcome { return Outcome{State: Ends, Code: code} }

func waits(format string, a ...any) Outcome {
	return Outcome{State: Waits, Message: fmt.Sprintf(format, a...)}
}

// waitsEvery is a process whose script sleeps every between its looks at
// what it waits for: it goes on as soon as its next look finds it.
func waitsEvery(every time.Duration, format string, a ...any) Outcome {
	o := waits(format, a...)
	o.Every = every
	return o
}

// Proc is a started process, as a program model sees it.
type Proc struct {
	Ctx  context.Context
	Node Node
	View *View
	// Cwd is the process's working directory; Env its environment.
	Cwd string
	Env map[string]string
	// Program is the executable's path, Args what follows it.
	Program string
	Args    []string
	// Sandbox is a HostProcess container's CONTAINER_SANDBOX_MOUNT_POINT
	// (without the trailing backslash); "" otherwise.
	Sandbox string
	// Memory is the Container's; keep is what the process holds if it
	// waits now.
	Memory any
	keep   any
	log    []string
}

// Logf writes a line to the process's output.
func (p *Proc) Logf(format string, a ...any) { p.log = append(p.log, fmt.Sprintf(format, a...)) }

// Start starts a container's process on node from image.
func Start(ctx context.Context, node Node, image Image, c Container) Outcome {
	argv := commandLine(c.Spec, image)
	if len(argv) == 0 {
		// containerd's CRI refuses a container with nothing to run
		// (internal/cri/opts/spec_windows.go and spec_linux_opts.go,
		// getArgs, containerd 301026e5).
		return Outcome{State: StartFails, Code: 128, Message: "failed to create containerd container: no command specified"}
	}
	env := map[string]string{}
	for _, kv := range image.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	podEnv := map[string]string{}
	for _, e := range c.Env {
		podEnv[e.Name] = e.Value
		env[e.Name] = e.Value
	}
	// The kubelet expands $(VAR) in command and args from the pod
	// spec's environment only, not the image's ENV, and leaves $env:X
	// and %X% alone (pkg/kubelet/container/helpers.go
	// ExpandContainerCommandAndArgs, kubernetes 5a3a5ff0).
	for i := range argv {
		argv[i] = expandVars(argv[i], podEnv)
	}
	cwd := c.Spec.WorkingDir
	if cwd == "" {
		cwd = image.WorkingDir
	}
	if node.OS == "windows" {
		if !hostProcess(c.Pod, c.Spec) {
			return startIsolated(ctx, node, image, c, argv, cwd, env)
		}
		return startHostProcess(ctx, node, image, c, argv, cwd, env)
	}
	return startLinux(ctx, node, image, c, argv, cwd, env)
}

// commandLine is what containerd runs: the container's command replaces
// the image's Entrypoint (and then its Cmd), args replace Cmd
// (containerd internal/cri/opts getArgs; the table of "Define a Command
// and Arguments for a Container", kubernetes.io).
func commandLine(c corev1.Container, image Image) []string {
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(append(argv, c.Command...), c.Args...)
	case len(c.Args) > 0:
		argv = append(append(argv, image.Entrypoint...), c.Args...)
	default:
		argv = append(append(argv, image.Entrypoint...), image.Cmd...)
	}
	return argv
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

func expandVars(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func hostProcess(pod *corev1.Pod, c corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.WindowsOptions != nil && c.SecurityContext.WindowsOptions.HostProcess != nil {
		return *c.SecurityContext.WindowsOptions.HostProcess
	}
	sc := pod.Spec.SecurityContext
	return sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess
}

// version is "1.7.24" as comparable numbers.
func version(v string) (major, minor int) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

func atLeast(v string, major, minor int) bool {
	a, b := version(v)
	return a > major || (a == major && b >= minor)
}

// buildNumber is 20348 of "10.0.20348.2849".
func buildNumber(b string) int {
	parts := strings.Split(b, ".")
	if len(parts) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(parts[2])
	return n
}

// BindFilter says whether HostProcess volume mounts are bound into the
// host's own paths on node: hcsshim 0.10+ (containerd 1.7+) uses the
// bind filter driver, which Windows Server 2019 lacks (hcsshim
// internal/jobcontainers/storage.go and jobcontainer.go, 7c9ff7f4; the
// "Volume mounts" section of kubernetes.io's HostProcess page).
func (n Node) BindFilter() bool {
	return n.OS == "windows" && atLeast(n.Containerd, 1, 7) && buildNumber(n.Build) >= 20348
}

// sandboxDir is a HostProcess container's CONTAINER_SANDBOX_MOUNT_POINT
// without the trailing backslash: C:\C\<id> with containerd 1.6 (hcsshim
// 0.9), C:\hpc with the bind filter, C:\hpc\<id> without it (hcsshim
// internal/jobcontainers/storage.go, v0.9.12 and 7c9ff7f4).
func sandboxDir(n Node, id string) string {
	switch {
	case !atLeast(n.Containerd, 1, 7):
		return `C:\C\` + id
	case n.BindFilter():
		return `C:\hpc`
	default:
		return `C:\hpc\` + id
	}
}

// The two spellings hcsshim replaces, literally and case-sensitively, in
// the command line, the working directory and every environment value
// (internal/jobcontainers/jobcontainer.go, 7c9ff7f4).
const (
	sandboxVarCmd = "%CONTAINER_SANDBOX_MOUNT_POINT%"
	sandboxVarPS  = "$env:CONTAINER_SANDBOX_MOUNT_POINT"
)

func replaceSandbox(s, dir string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, sandboxVarCmd, dir), sandboxVarPS, dir)
}

func startHostProcess(ctx context.Context, node Node, image Image, c Container, argv []string, cwd string, env map[string]string) Outcome {
	sandbox := sandboxDir(node, c.ID)
	bind := node.BindFilter()
	for i := range argv {
		argv[i] = replaceSandbox(argv[i], sandbox)
	}
	for k, v := range env {
		env[k] = replaceSandbox(v, sandbox)
	}
	env["CONTAINER_SANDBOX_MOUNT_POINT"] = sandbox + `\`
	view, cwd := hostProcessView(node, image, c, cwd)
	p := &Proc{Ctx: ctx, Node: node, View: view, Cwd: cwd, Env: env, Sandbox: sandbox, Memory: c.Memory}
	cl := strings.Join(quoteAll(argv), " ")
	if bind {
		// With the bind filter hcsshim runs `cmd /c <command line>`:
		// the container starts whatever the line names, and cmd reports
		// what it cannot run (jobcontainer.go, 7c9ff7f4).
		return finish(p, runCmd(p, argv, cl))
	}
	exe, found := searchPath(p, argv[0])
	if !found {
		// hcsshim internal/jobcontainers/path.go; the message users
		// report (kubernetes/website#29924).
		return startError(c.Spec.Name, fmt.Sprintf("failed to get application name from commandline %q: failed to find executable %q", cl, argv[0]))
	}
	if !isPE(exe) {
		// CreateProcess runs only PE images: ERROR_BAD_EXE_FORMAT (193).
		return startError(c.Spec.Name, "failed to start host process: failed to create process: %1 is not a valid Win32 application.")
	}
	p.Program, p.Args = exe, argv[1:]
	return finish(p, run(p))
}

// HostProcess is what a process of a HostProcess container sees: the
// host's disk with the image at the sandbox mount point and the volumes
// linked (and bound) as hcsshim does; its working directory (cwd is the
// spec's or the image's, "" for none) and CONTAINER_SANDBOX_MOUNT_POINT.
func HostProcess(node Node, image Image, c Container, cwd string) (view *View, dir, sandboxMountPoint string) {
	view, dir = hostProcessView(node, image, c, cwd)
	return view, dir, sandboxDir(node, c.ID) + `\`
}

func hostProcessView(node Node, image Image, c Container, cwd string) (*View, string) {
	sandbox := sandboxDir(node, c.ID)
	bind := node.BindFilter()
	view := &View{windows: true, host: node.Disk, hostVisible: true, imageRoot: sandbox, image: map[string]bool{}}
	for _, f := range image.Files {
		view.image[strings.TrimPrefix(f, "/")] = true
	}
	// Every mount is linked under the sandbox; with the bind filter it
	// is also bound at its own path, seen only by the container
	// (hcsshim internal/jobcontainers/mounts.go; containerd
	// spec_windows_opts.go parseMount).
	for _, m := range c.Mounts {
		target := strings.TrimPrefix(view.norm(m.At, `C:\`), "C:")
		mp := mountPoint{files: m.Files, readOnly: m.ReadOnly}
		if m.HostDir != "" {
			mp.hostDir = view.norm(m.HostDir, `C:\`)
		}
		linked := mp
		linked.at = sandbox + target
		view.mounts = append(view.mounts, linked)
		if bind {
			mp.at = "C:" + target
			view.mounts = append(view.mounts, mp)
		}
	}
	// The working directory: the spec's or the image's, else C:\ (OCI's
	// default before containerd 2.0); where it names no sandbox path and
	// there is no bind filter, hcsshim puts it under the sandbox
	// (jobcontainer.go; containerd container_create.go).
	named := cwd != ""
	if named {
		if strings.Contains(cwd, sandboxVarCmd) || strings.Contains(cwd, sandboxVarPS) {
			cwd = replaceSandbox(cwd, sandbox)
		} else if !bind {
			cwd = sandbox + strings.TrimPrefix(view.norm(cwd, `C:\`), "C:")
		}
	} else {
		cwd = `C:\`
	}
	cwd = view.norm(cwd, `C:\`)
	return view, cwd
}

// startError is a process the runtime could not start, as the kubelet
// records it (containerd container_start.go: the task's start error).
func startError(name, msg string) Outcome {
	return Outcome{State: StartFails, Code: 128, Message: fmt.Sprintf("failed to start containerd task %q: %s: unknown", name, msg)}
}

func finish(p *Proc, o Outcome) Outcome {
	o.Log = append(p.log, o.Log...)
	if o.State == Waits {
		o.Memory = p.keep
	}
	return o
}

func quoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return out
}

// isPE says whether a file is a program CreateProcess runs.
func isPE(p string) bool {
	ext := strings.ToLower(path.Ext(strings.ReplaceAll(p, `\`, "/")))
	return ext == ".exe" || ext == ".com"
}

// searchPath finds an executable as SearchPathW does for hcsshim: the
// working directory, the PATH (the container's, then the sandbox,
// PowerShell's and WMI's directories), System32 and the Windows
// directory; ".exe" is appended only to a name without an extension
// (hcsshim internal/jobcontainers/path.go, 7c9ff7f4).
func searchPath(p *Proc, name string) (string, bool) {
	withExt := name
	if path.Ext(strings.ReplaceAll(name, `\`, "/")) == "" {
		withExt += ".exe"
	}
	if strings.ContainsAny(name, `\/`) || (len(name) > 1 && name[1] == ':') {
		full := p.View.norm(withExt, p.Cwd)
		return full, p.View.Exists(full, p.Cwd)
	}
	dirs := []string{p.Cwd}
	dirs = append(dirs, strings.Split(p.Env["PATH"], ";")...)
	dirs = append(dirs, p.Sandbox, `C:\Windows\System32\WindowsPowerShell\v1.0`, `C:\Windows\System32\Wbem`, `C:\Windows\System32`, `C:\Windows`)
	for _, d := range dirs {
		if strings.TrimSpace(d) == "" {
			continue
		}
		full := p.View.norm(strings.TrimRight(d, `\`)+`\`+withExt, p.Cwd)
		if p.View.Exists(full, p.Cwd) {
			return full, true
		}
	}
	return "", false
}

// runCmd is `cmd /c <line>` on a host with the bind filter: cmd finds the
// first word as it finds a command (the working directory, then PATH,
// trying .COM, .EXE, .BAT, .CMD where the name has no extension).
func runCmd(p *Proc, argv []string, cl string) Outcome {
	name := argv[0]
	var exe string
	found := false
	for _, ext := range []string{"", ".com", ".exe", ".bat", ".cmd"} {
		if ext != "" && path.Ext(strings.ReplaceAll(name, `\`, "/")) != "" {
			break
		}
		if exe, found = searchPath(p, name+ext); found {
			break
		}
	}
	if !found {
		// cmd.exe's message for a command it cannot find; exit 9009.
		return exits(9009, "'%s' is not recognized as an internal or external command,\noperable program or batch file.", name)
	}
	if !isPE(exe) && !strings.HasSuffix(strings.ToLower(exe), ".bat") && !strings.HasSuffix(strings.ToLower(exe), ".cmd") {
		// cmd hands a document to its file association: a .ps1 opens in
		// Notepad on Windows Server, it is not run by PowerShell.
		return waits("%s is not a program: cmd /c %s opened it with its file association, so the script never ran (run it as powershell.exe's argument)", exe, cl)
	}
	p.Program, p.Args = exe, argv[1:]
	return run(p)
}

// builtinAccounts are the accounts a process-isolated container may run
// as without a local account of its own: the two every Windows base
// image has and the service accounts (the "Configure RunAsUserName for
// Windows pods and containers" page of kubernetes.io; a name HCS does not
// find fails the container: the [sig-windows] SecurityContext "unknown
// usernames" specs, kubernetes test/e2e/windows/security_context.go
// @v1.36.3, expect exactly that).
var builtinAccounts = map[string]bool{
	"containeruser": true, "containeradministrator": true,
	`nt authority\system`: true, `nt authority\local service`: true, `nt authority\network service`: true,
}

// runAsUserName is the account a Windows container runs as: the
// container's windowsOptions.runAsUserName, else the pod's, else the
// image's USER (the kubelet's DetermineEffectiveSecurityContext merges
// the first two, pkg/securitycontext/util.go; containerd falls back to
// the image's, internal/cri/server/container_create_windows.go).
func runAsUserName(pod *corev1.Pod, c corev1.Container, image Image) string {
	if sc := c.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.RunAsUserName != nil {
		return *sc.WindowsOptions.RunAsUserName
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.RunAsUserName != nil {
		return *sc.WindowsOptions.RunAsUserName
	}
	return image.User
}

// startIsolated starts a process-isolated Windows container's process in
// its own silo: it sees the image as C:\ and runs as runAsUserName, an
// account HCS must find (CreateProcess with an unknown one fails the
// container's start: StartError). Only cmd.exe's command lines are
// modelled (echo of %USERNAME% and the built-ins, as for HostProcess
// containers); anything else runs, as before.
func startIsolated(ctx context.Context, node Node, image Image, c Container, argv []string, cwd string, env map[string]string) Outcome {
	user := runAsUserName(c.Pod, c.Spec, image)
	if user != "" && !builtinAccounts[strings.ToLower(user)] {
		return startError(c.Spec.Name, fmt.Sprintf("failed to create shim task: hcs::System::CreateProcess %s: The user name or password is incorrect.", c.ID))
	}
	if user != "" {
		// Windows sets USERNAME to the account a process runs as.
		env["USERNAME"] = user
	}
	view := &View{windows: true, host: node.Disk, imageRoot: `C:\`, image: map[string]bool{}}
	for _, f := range image.Files {
		view.image[strings.TrimPrefix(f, "/")] = true
	}
	if cwd == "" {
		cwd = `C:\`
	}
	p := &Proc{Ctx: ctx, Node: node, View: view, Cwd: view.norm(cwd, `C:\`), Env: env, Memory: c.Memory}
	base := strings.ToLower(path.Base(strings.ReplaceAll(argv[0], `\`, "/")))
	exe, found := searchPath(p, argv[0])
	if found && (base == "pause" || base == "pause.exe") {
		// The pause image's program waits for a signal and never
		// ends by itself (kubernetes build/pause/windows/pause.c
		// @v1.36.3): the volumes specs' containers of a Never pod
		// must stay Running.
		return Outcome{State: Pauses}
	}
	if (base != "cmd" && base != "cmd.exe") || !found {
		return Outcome{State: Runs}
	}
	p.Program, p.Args = exe, argv[1:]
	return finish(p, cmd(p))
}

func startLinux(ctx context.Context, node Node, image Image, c Container, argv []string, cwd string, env map[string]string) Outcome {
	view := &View{host: node.Disk, imageRoot: "/", image: map[string]bool{}}
	for _, f := range image.Files {
		view.image[strings.TrimPrefix(f, "/")] = true
	}
	for _, m := range c.Mounts {
		mp := mountPoint{at: view.norm(m.At, "/"), files: m.Files, readOnly: m.ReadOnly}
		if m.HostDir != "" {
			mp.hostDir = view.norm(m.HostDir, "/")
		}
		view.mounts = append(view.mounts, mp)
	}
	if cwd == "" {
		cwd = "/"
	}
	p := &Proc{Ctx: ctx, Node: node, View: view, Cwd: view.norm(cwd, "/"), Env: env, Memory: c.Memory}
	name := argv[0]
	exe := ""
	if strings.Contains(name, "/") {
		exe = view.norm(name, p.Cwd)
		if !view.Exists(exe, p.Cwd) {
			return linuxStartError(fmt.Sprintf("exec: %q: stat %s: no such file or directory", name, name))
		}
	} else {
		search := env["PATH"]
		if search == "" {
			search = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		}
		for _, d := range strings.Split(search, ":") {
			if d != "" && view.Exists(d+"/"+name, p.Cwd) {
				exe = view.norm(d+"/"+name, p.Cwd)
				break
			}
		}
		if exe == "" {
			return linuxStartError(fmt.Sprintf("exec: %q: executable file not found in $PATH", name))
		}
	}
	p.Program, p.Args = exe, argv[1:]
	return finish(p, run(p))
}

// linuxStartError is runc's refusal, as the kubelet shows it
// (StartError, exit code 128).
func linuxStartError(msg string) Outcome {
	return Outcome{State: StartFails, Code: 128, Message: "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: " + msg + ": unknown"}
}

// run runs the program p names, by its model; a program no model knows
// runs.
func run(p *Proc) Outcome {
	if m := p.model(p.Program); m != nil {
		return m(p)
	}
	return Outcome{State: Runs}
}

// imagePath is a path of the process's view as the image names it
// ("/kube-proxy/start.ps1"), or "" when it is not in the image's tree.
func (p *Proc) imagePath(full string) string {
	if rest, ok := p.View.under(full, p.View.imageRoot); ok {
		return "/" + rest
	}
	return ""
}

func (p *Proc) model(full string) func(*Proc) Outcome {
	base := strings.ToLower(path.Base(strings.ReplaceAll(full, `\`, "/")))
	if m, ok := systemPrograms[base]; ok && p.imagePath(full) == "" {
		return m
	}
	if m, ok := imagePrograms[strings.ToLower(p.imagePath(full))]; ok {
		return m
	}
	return nil
}
