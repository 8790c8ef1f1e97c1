// Package ctrshell is the shell of a simulated container's OS, run by
// `kubectl exec` inside the container's view: PowerShell and cmd in a
// Windows container, sh in a Linux one, or one of the image's programs
// named directly (`-- hostname`, `-- cat /etc/foo/key`). It answers what
// the container truthfully has (its hostname, environment, working
// directory and files: image, writable layer and volumes) and refuses
// anything else in the words of the shell it imitates. No application
// process runs in a simulated container, and the shell says so once per
// exec session.
package ctrshell

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"path"
	"sort"
	"strings"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
)

// FS is the container's filesystem (a containerruntime.View).
type FS interface {
	Windows() bool
	Norm(p, cwd string) string
	Exists(p, cwd string) bool
	IsDir(p, cwd string) bool
	ReadFile(p, cwd string) ([]byte, error)
	WriteFile(p, cwd string, data []byte) (bool, error)
	AppendFile(p, cwd string, data []byte) error
	Mkdir(p, cwd string) error
	List(p, cwd string) ([]containerruntime.Entry, error)
}

// Container is what an exec runs in.
type Container struct {
	// Pod ("ns/name") and Name name the container in the notice; ID is
	// the runtime's container ID, which a start error names.
	Pod, Name, ID string
	Hostname      string
	// Env is the process environment, KEY=VALUE, in the kubelet's order.
	Env []string
	// Cwd is the working directory a new process starts in.
	Cwd string
	FS  FS
	// Dial connects from the pod's network as a packet from the pod goes:
	// the pod's IP as source, a Service's ClusterIP through its node's
	// kube-proxy rules, another node's pod through the CNI's routes (nil:
	// the container has no network, and a connection fails).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// StartError is the runtime's refusal to start the program an exec names;
// the kubelet reports it as the exec's error.
type StartError struct{ Message string }

func (e *StartError) Error() string { return e.Message }

// Answers names what the simulated shells answer, for the refusal message.
const Answers = "hostname, the environment, the working directory, listing, reading and writing files, mkdir, exit and (busybox) wget"

// Exec runs argv in c with the exec session's streams, and returns the
// exit code; a *StartError when the program is not in the container.
func Exec(c *Container, argv []string, in io.Reader, out, errw io.Writer, tty bool) (int, error) {
	if len(argv) == 0 {
		return 0, &StartError{Message: "failed to exec in container: no command specified"}
	}
	s := newSession(c, in, out, errw, tty)
	prog, ok := s.find(argv[0])
	if !ok {
		return 0, &StartError{Message: s.notFound(argv[0])}
	}
	base := strings.ToLower(path.Base(strings.ReplaceAll(prog, `\`, "/")))
	fmt.Fprintf(s.errw, "winkube: %s in container %s of pod %s is winkube's simulated shell: no application process runs in the container, and it answers only %s.%s",
		shellName(base), c.Name, c.Pod, Answers, s.nl)
	if s.windows {
		switch strings.TrimSuffix(base, ".exe") {
		case "cmd":
			return s.cmdMain(argv[1:]), nil
		case "powershell", "pwsh":
			return s.psMain(argv[1:]), nil
		case "hostname":
			s.println(s.c.Hostname)
			return 0, nil
		}
		fmt.Fprintf(s.errw, "winkube: %s is in the container's image but is not simulated: no program runs in a simulated container.%s", prog, s.nl)
		return 1, nil
	}
	switch base {
	case "sh", "bash", "ash", "busybox":
		return s.shMain(base, argv[1:]), nil
	}
	return s.shCommand(append([]string{base}, argv[1:]...)), nil
}

// shellName names what runs, for the notice.
func shellName(base string) string {
	switch strings.TrimSuffix(base, ".exe") {
	case "cmd":
		return "cmd.exe"
	case "powershell":
		return "Windows PowerShell"
	case "pwsh":
		return "PowerShell"
	}
	return base
}

type session struct {
	c       *Container
	windows bool
	env     map[string]string
	order   []string
	cwd     string
	in      *bufio.Reader
	out     io.Writer
	errw    io.Writer
	tty     bool
	nl      string
	exited  bool
	code    int
	shName  string
}

func newSession(c *Container, in io.Reader, out, errw io.Writer, tty bool) *session {
	s := &session{c: c, windows: c.FS.Windows(), env: map[string]string{}, cwd: c.Cwd, out: out, errw: errw, tty: tty, nl: "\n"}
	if s.cwd == "" {
		s.cwd = "/"
		if s.windows {
			s.cwd = `C:\`
		}
	}
	s.cwd = c.FS.Norm(s.cwd, s.cwd)
	if tty {
		// A terminal's line discipline turns "\n" into "\r\n".
		s.nl = "\r\n"
		s.out = crlf{out}
		s.errw = crlf{errw}
	}
	if in != nil {
		s.in = bufio.NewReader(in)
	}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		s.setenv(k, v)
	}
	return s
}

type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	_, err := c.w.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(string(p), "\r\n", "\n"), "\n", "\r\n")))
	return len(p), err
}

func (s *session) setenv(k, v string) {
	key := s.envKey(k)
	if _, ok := s.env[key]; !ok {
		s.order = append(s.order, k)
	}
	s.env[key] = v
}

func (s *session) unsetenv(k string) {
	key := s.envKey(k)
	delete(s.env, key)
	for i, o := range s.order {
		if s.envKey(o) == key {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// envKey: Windows' environment names match without regard to case.
func (s *session) envKey(k string) string {
	if s.windows {
		return strings.ToUpper(k)
	}
	return k
}

func (s *session) getenv(k string) (string, bool) {
	v, ok := s.env[s.envKey(k)]
	return v, ok
}

// environ is the environment in order; sorted reports it as `set` and
// Get-ChildItem env: do.
func (s *session) environ(sorted bool) []string {
	names := append([]string(nil), s.order...)
	if sorted {
		sort.Slice(names, func(i, j int) bool { return strings.ToUpper(names[i]) < strings.ToUpper(names[j]) })
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+"="+s.env[s.envKey(n)])
	}
	return out
}

func (s *session) println(a ...any) { fmt.Fprint(s.out, fmt.Sprint(a...)+s.nl) }

func (s *session) errorln(a ...any) { fmt.Fprint(s.errw, fmt.Sprint(a...)+s.nl) }

// readLine reads one line of input; with a terminal it echoes what is
// typed and handles backspace, ^C and ^D as a terminal's line discipline
// does. ok is false at the end of input.
func (s *session) readLine() (string, bool) {
	if s.in == nil {
		return "", false
	}
	if !s.tty {
		line, err := s.in.ReadString('\n')
		if err != nil && line == "" {
			return "", false
		}
		return strings.TrimRight(line, "\r\n"), true
	}
	var b []rune
	for {
		r, _, err := s.in.ReadRune()
		if err != nil {
			return string(b), len(b) > 0
		}
		switch r {
		case '\r', '\n':
			_, _ = io.WriteString(s.out, "\n")
			return string(b), true
		case 0x7f, 0x08:
			if len(b) > 0 {
				b = b[:len(b)-1]
				_, _ = io.WriteString(s.out, "\b \b")
			}
		case 0x03:
			// ^C drops the line being typed.
			_, _ = io.WriteString(s.out, "^C\n")
			return "", true
		case 0x04:
			if len(b) == 0 {
				return "", false
			}
		default:
			if r >= ' ' {
				b = append(b, r)
				_, _ = io.WriteString(s.out, string(r))
			}
		}
	}
}

// find is the program argv0 names, searched as the container's runtime
// searches: an explicit path is taken as is; otherwise a Windows container
// searches as CreateProcess does (the System32 and Windows directories,
// then PATH; ".exe" is added to a name without an extension) and a Linux
// one the PATH (runc, as Go's exec.LookPath).
func (s *session) find(argv0 string) (string, bool) {
	fs := s.c.FS
	if s.windows {
		name := argv0
		if path.Ext(strings.ReplaceAll(name, `\`, "/")) == "" {
			name += ".exe"
		}
		if strings.ContainsAny(argv0, `\/`) || (len(argv0) > 1 && argv0[1] == ':') {
			p := fs.Norm(name, s.cwd)
			return p, fs.Exists(p, s.cwd) && !fs.IsDir(p, s.cwd)
		}
		dirs := []string{s.cwd, `C:\Windows\System32`, `C:\Windows`}
		search, ok := s.getenv("PATH")
		if !ok {
			search = windowsSystemPath
		}
		dirs = append(dirs, strings.Split(search, ";")...)
		for _, d := range dirs {
			if strings.TrimSpace(d) == "" {
				continue
			}
			p := fs.Norm(strings.TrimRight(d, `\`)+`\`+name, s.cwd)
			if fs.Exists(p, s.cwd) && !fs.IsDir(p, s.cwd) {
				return p, true
			}
		}
		return "", false
	}
	if strings.Contains(argv0, "/") {
		p := fs.Norm(argv0, s.cwd)
		return p, fs.Exists(p, s.cwd) && !fs.IsDir(p, s.cwd)
	}
	search, ok := s.getenv("PATH")
	if !ok || search == "" {
		search = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, d := range strings.Split(search, ":") {
		if d == "" {
			continue
		}
		p := fs.Norm(d+"/"+argv0, "/")
		if fs.Exists(p, "/") && !fs.IsDir(p, "/") {
			return p, true
		}
	}
	return "", false
}

// windowsSystemPath is the Path a Windows container's process gets from
// the system when neither the image nor the pod sets one: Windows
// Server's default, which holds Windows PowerShell's and WMI's
// directories (the same directories hcsshim adds for a HostProcess
// container, internal/jobcontainers/path.go, 7c9ff7f4). A Path the pod
// sets replaces it.
const windowsSystemPath = `C:\Windows\system32;C:\Windows;C:\Windows\System32\Wbem;C:\Windows\System32\WindowsPowerShell\v1.0\`

// notFound is the runtime's error for an exec of a program the container
// does not have, as containerd's CRI reports it (streaming.go
// "failed to exec in container: %w" around container_execsync.go
// execInternal's "failed to start exec %q: %w", containerd 301026e5, and
// the ttrpc error's ": unknown"): on Windows hcsshim's CreateProcess error
// (internal/hcs/errors.go SystemError: "<op> <container id>: <error>", op
// "hcs::System::CreateProcess", hcsshim 7c9ff7f4) with Windows'
// ERROR_FILE_NOT_FOUND text; on Linux runc's exec error, whose wording
// after "OCI runtime exec failed:" is taken from users' reports of runc
// 1.1 and was not verified against runc's source here.
func (s *session) notFound(argv0 string) string {
	if s.windows {
		return fmt.Sprintf("failed to exec in container: failed to start exec %q: hcs::System::CreateProcess %s: The system cannot find the file specified.: unknown", execID(), s.c.ID)
	}
	what := fmt.Sprintf("exec: %q: executable file not found in $PATH", argv0)
	if strings.Contains(argv0, "/") {
		what = fmt.Sprintf("exec: %q: stat %s: no such file or directory", argv0, argv0)
	}
	return fmt.Sprintf("failed to exec in container: failed to start exec %q: OCI runtime exec failed: exec failed: unable to start container process: %s: unknown", execID(), what)
}

// execID is an exec's ID as containerd generates it (internal/cri/util
// GenerateID: 32 random bytes, hex).
func execID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redirect splits "cmd > file" and "cmd >> file" (outside quotes).
func redirect(line string) (cmd, file string, appendTo bool) {
	inS, inD := false, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS:
			inD = !inD
		case c == '>' && !inS && !inD:
			rest := line[i+1:]
			if strings.HasPrefix(rest, ">") {
				appendTo = true
				rest = rest[1:]
			}
			return strings.TrimSpace(line[:i]), strings.Trim(strings.TrimSpace(rest), `"'`), appendTo
		}
	}
	return line, "", false
}

// splitTop splits a line at sep outside quotes.
func splitTop(line string, sep byte) []string {
	var parts []string
	inS, inD, start := false, false, 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS:
			inD = !inD
		case c == sep && !inS && !inD:
			parts = append(parts, line[start:i])
			start = i + 1
		}
	}
	return append(parts, line[start:])
}

// capture runs f with the session's output going to a buffer, lines ended
// with nl (a redirection's or a pipeline's file), and returns what it wrote.
func (s *session) capture(nl string, f func()) []byte {
	var buf bytes.Buffer
	out, oldNL := s.out, s.nl
	s.out, s.nl = &buf, nl
	defer func() { s.out, s.nl = out, oldNL }()
	f()
	return buf.Bytes()
}
