// Package vmshell is what answers a command on an emulated machine's SSH
// session. The machine has no operating system behind it, so the shell
// runs only what it can answer truthfully from the machine's disk and its
// simulated kubelet: the host name, files (logs among them), the Linux
// journal's units, the Windows HNS networks and endpoints, the kubelet
// version. Anything else is refused with a message that says so, never
// faked. Windows sessions speak PowerShell's names, as CAPZ's Windows
// images make PowerShell the SSH shell.
package vmshell

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"
	"unicode/utf16"

	"golang.org/x/term"

	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// Machine is what the shell sees of the machine it runs on.
type Machine struct {
	Hostname string
	Disk     vmdisk.Disk
	// KubeletVersion is the installed kubelet's, "" before it runs.
	KubeletVersion func() string
	// HNS lists the Windows node's networks and endpoints; nil before the
	// node's kubelet runs.
	HNS func() ([]kubelet.HNSNetwork, []kubelet.HNSEndpoint)
	// Dial connects from the machine to host:port as its own processes
	// do (curl); nil before the machine has a network.
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	// Build is a Windows machine's OS build ("20348"), as
	// [Environment]::OSVersion.Version.Build gives it.
	Build string
	// Node is the machine runtime's side of a machine no Cluster API
	// object made, which a join script run in its shell joins (nil on a
	// Cluster API node: its kubeadm ran at boot).
	Node NodeHost

	// functions is the running step script's text before its first step
	// (its functions, such as Get-Verified).
	functions string

	// cmd: the session is cmd.exe's (started as 'cmd.exe'), which knows
	// cmd's names only (type, dir), not PowerShell's.
	cmd bool
}

// Exit statuses, as the machine's shell would give them.
const (
	exitFailed   = 1
	exitNotFound = 127
)

type command func(m *Machine, args []string, out, errw io.Writer) int

func (m *Machine) commands() map[string]command {
	if m.cmd {
		return map[string]command{
			"hostname": hostname, "hostname.exe": hostname, "type": getContent, "dir": listDir,
			"kubelet": kubeletVersion, "kubelet.exe": kubeletVersion,
			"curl": curl, "curl.exe": curl,
		}
	}
	if m.Disk.Windows {
		return map[string]command{
			"hostname": hostname, "hostname.exe": hostname,
			"get-content": getContent, "gc": getContent, "cat": getContent, "type": getContent,
			"get-childitem": listDir, "ls": listDir, "dir": listDir, "gci": listDir,
			"get-hnsnetwork": hnsNetworks, "get-hnsendpoint": hnsEndpoints,
			"kubelet": kubeletVersion, "kubelet.exe": kubeletVersion,
			// Windows PowerShell 5.1 aliases curl and wget to
			// Invoke-WebRequest; curl.exe is the real curl.
			"invoke-webrequest": invokeWebRequest, "iwr": invokeWebRequest, "curl": invokeWebRequest, "wget": invokeWebRequest,
			"curl.exe": curl,
			// sc is Set-Content in PowerShell: only sc.exe is the
			// service control tool.
			"sc.exe": serviceControl,
		}
	}
	return map[string]command{
		"hostname": hostname, "cat": getContent, "ls": listDir, "journalctl": journalctl,
		"kubelet": kubeletVersion, "/usr/bin/kubelet": kubeletVersion,
		"curl": curl, "/usr/bin/curl": curl,
	}
}

// names lists what the shell answers, as its user would type it.
func (m *Machine) names() string {
	if m.cmd {
		return "hostname, type, dir, kubelet --version, curl URL"
	}
	if m.Disk.Windows {
		return "hostname, Get-Content (cat, gc, type), Get-ChildItem (dir, gci, ls), Get-HnsNetwork and Get-HnsEndpoint (| ConvertTo-Json), kubelet --version, Invoke-WebRequest URL (iwr, curl, wget), curl.exe URL, sc.exe delete SERVICE"
	}
	return "hostname, cat, ls, journalctl -u UNIT, kubelet --version, curl URL (sudo allowed)"
}

func (m *Machine) refuse(what string, errw io.Writer) int {
	os := "Linux"
	if m.Disk.Windows {
		os = "Windows"
	}
	fmt.Fprintf(errw, "winkube: this emulated %s machine cannot run %q: it has no operating system behind it, only what winkube simulates. It answers: %s.\n", os, what, m.names())
	return exitNotFound
}

// Run runs one command line and returns its exit status.
func (m *Machine) Run(line string, out, errw io.Writer) int {
	line = strings.TrimSpace(line)
	if line == "" {
		return 0
	}
	if code, ok := m.runSteps(line, out); ok {
		return code
	}
	if n := strings.Count(line, "\n") + 1; n > 1 {
		// A whole script (powershell -EncodedCommand's): the shell runs
		// single commands only, and says so of the script as a whole.
		first, _, _ := strings.Cut(line, "\n")
		return m.refuse(fmt.Sprintf("a script of %d lines (%s ...)", n, strings.TrimSpace(first)), errw)
	}
	stages := strings.Split(line, "|")
	args, err := split(stages[0])
	if err != nil {
		fmt.Fprintln(errw, err)
		return exitFailed
	}
	if len(args) == 0 {
		return 0
	}
	if !m.Disk.Windows && args[0] == "sudo" {
		// capi may sudo without a password on Linux nodes.
		args = args[1:]
		if len(args) == 0 {
			fmt.Fprintln(errw, "usage: sudo COMMAND")
			return exitFailed
		}
	}
	for _, bad := range []string{";", "&&", "||", ">", "<", "`", "$("} {
		if strings.Contains(line, bad) {
			return m.refuse(line, errw)
		}
	}
	toJSON := false
	if len(stages) == 2 && m.Disk.Windows && !m.cmd {
		next, _ := split(stages[1])
		if len(next) == 0 || !strings.EqualFold(next[0], "ConvertTo-Json") {
			return m.refuse(line, errw)
		}
		toJSON = true
	} else if len(stages) > 1 {
		return m.refuse(line, errw)
	}
	name := args[0]
	if m.Disk.Windows {
		name = strings.ToLower(name)
	}
	cmd, ok := m.commands()[name]
	if !ok {
		return m.refuse(args[0], errw)
	}
	if toJSON {
		if name != "get-hnsnetwork" && name != "get-hnsendpoint" {
			return m.refuse(line, errw)
		}
		return hnsJSON(m, name, out, errw)
	}
	return cmd(m, args[1:], out, errw)
}

// split divides a command line into words, honouring quotes.
func split(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

func hostname(m *Machine, _ []string, out, _ io.Writer) int {
	fmt.Fprintln(out, m.Hostname)
	return 0
}

func kubeletVersion(m *Machine, args []string, out, errw io.Writer) int {
	if len(args) != 1 || args[0] != "--version" {
		return m.refuse("kubelet "+strings.Join(args, " "), errw)
	}
	v := ""
	if m.KubeletVersion != nil {
		v = m.KubeletVersion()
	}
	if v == "" {
		fmt.Fprintln(errw, "kubelet has not been started on this machine yet")
		return exitFailed
	}
	fmt.Fprintln(out, "Kubernetes "+v)
	return 0
}

// paths reads the path arguments of a file command; -Path and -Tail are
// PowerShell's, -n is tail's.
func paths(args []string) (ps []string, tail int, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.EqualFold(a, "-Path") || strings.EqualFold(a, "-LiteralPath"):
			continue
		case strings.EqualFold(a, "-Tail"):
			if i+1 >= len(args) {
				return nil, 0, errors.New("-Tail needs a number")
			}
			if _, err := fmt.Sscan(args[i+1], &tail); err != nil || tail < 0 {
				return nil, 0, fmt.Errorf("-Tail %q is not a number", args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-"):
			// ls -la and the like change only the listing's layout.
		default:
			ps = append(ps, a)
		}
	}
	return ps, tail, nil
}

func notFound(m *Machine, p string, errw io.Writer) int {
	if m.Disk.Windows {
		fmt.Fprintf(errw, "Get-Content : Cannot find path '%s' because it does not exist.\n", p)
	} else {
		fmt.Fprintf(errw, "cat: %s: No such file or directory\n", p)
	}
	return exitFailed
}

func getContent(m *Machine, args []string, out, errw io.Writer) int {
	ps, tail, err := paths(args)
	if err != nil || len(ps) == 0 {
		fmt.Fprintln(errw, "usage: cat FILE... (Get-Content [-Path] FILE [-Tail N] on Windows)")
		return exitFailed
	}
	return m.eachPath(ps, errw, func(p, host string) int {
		b, err := os.ReadFile(host)
		if errors.Is(err, fs.ErrNotExist) {
			return notFound(m, p, errw)
		}
		if err != nil {
			fmt.Fprintf(errw, "%s: %v\n", p, err)
			return exitFailed
		}
		if tail > 0 {
			lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
			if len(lines) > tail {
				lines = lines[len(lines)-tail:]
			}
			b = []byte(strings.Join(lines, "") + "\n")
		}
		_, _ = out.Write(b)
		return 0
	})
}

// eachPath runs do for each path on the machine's disk; the status is
// the last failure's, as a shell reports a partly failed command.
func (m *Machine) eachPath(ps []string, errw io.Writer, do func(p, host string) int) int {
	status := 0
	for _, p := range ps {
		host, err := m.Disk.HostPath(p)
		if err != nil {
			fmt.Fprintln(errw, err)
			status = exitFailed
			continue
		}
		if st := do(p, host); st != 0 {
			status = st
		}
	}
	return status
}

func listDir(m *Machine, args []string, out, errw io.Writer) int {
	ps, _, err := paths(args)
	if err != nil {
		fmt.Fprintln(errw, err)
		return exitFailed
	}
	if len(ps) == 0 {
		ps = []string{m.Disk.Home()}
	}
	return m.eachPath(ps, errw, func(p, host string) int {
		entries, err := os.ReadDir(host)
		if err != nil {
			if st, serr := os.Stat(host); serr == nil && !st.IsDir() {
				entries = []fs.DirEntry{fs.FileInfoToDirEntry(st)}
			} else {
				if m.Disk.Windows {
					fmt.Fprintf(errw, "Get-ChildItem : Cannot find path '%s' because it does not exist.\n", p)
				} else {
					fmt.Fprintf(errw, "ls: cannot access '%s': No such file or directory\n", p)
				}
				return exitFailed
			}
		}
		if m.Disk.Windows {
			clean, _ := m.Disk.Clean(p)
			fmt.Fprintf(out, "\n    Directory: %s\n\nMode                 LastWriteTime         Length Name\n----                 -------------         ------ ----\n", clean)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue
			}
			if m.Disk.Windows {
				mode, size := "-a----", fmt.Sprint(info.Size())
				if e.IsDir() {
					mode, size = "d-----", ""
				}
				fmt.Fprintf(out, "%-6s %24s %14s %s\n", mode, info.ModTime().Format("1/2/2006   3:04 PM"), size, e.Name())
			} else {
				fmt.Fprintf(out, "%s %10d %s %s\n", info.Mode().String(), info.Size(), info.ModTime().Format(time.DateTime), e.Name())
			}
		}
		return 0
	})
}

// journalctl prints the emulated journal's units; the output options are
// accepted and the lines given as the units wrote them.
func journalctl(m *Machine, args []string, out, errw io.Writer) int {
	var units []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-u" || a == "--unit":
			if i+1 >= len(args) {
				fmt.Fprintln(errw, "journalctl: option requires an argument -- 'u'")
				return exitFailed
			}
			units = append(units, args[i+1])
			i++
		case strings.HasPrefix(a, "--unit="):
			units = append(units, strings.TrimPrefix(a, "--unit="))
		case a == "--no-pager" || strings.HasPrefix(a, "--output=") || a == "-o" && i+1 < len(args):
			if a == "-o" {
				i++
			}
		default:
			return m.refuse("journalctl "+strings.Join(args, " "), errw)
		}
	}
	if len(units) == 0 {
		return m.refuse("journalctl without -u UNIT", errw)
	}
	for _, u := range units {
		host, err := m.Disk.HostPath(vmdisk.Journal(u))
		if err != nil {
			fmt.Fprintln(errw, err)
			return exitFailed
		}
		b, err := os.ReadFile(host)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintln(out, "-- No entries --")
			continue
		}
		if err != nil {
			fmt.Fprintln(errw, err)
			return exitFailed
		}
		_, _ = out.Write(b)
	}
	return 0
}

func (m *Machine) hns() ([]kubelet.HNSNetwork, []kubelet.HNSEndpoint) {
	if m.HNS == nil {
		return nil, nil
	}
	return m.HNS()
}

func hnsNetworks(m *Machine, _ []string, out, _ io.Writer) int {
	nets, _ := m.hns()
	for _, n := range nets {
		fmt.Fprintf(out, "\nName          : %s\nType          : %s\nAddressPrefix : %s\nManagementIP  : %s\n", n.Name, n.Type, n.AddressPrefix, n.ManagementIP)
	}
	return 0
}

func hnsEndpoints(m *Machine, _ []string, out, _ io.Writer) int {
	_, eps := m.hns()
	for _, e := range eps {
		fmt.Fprintf(out, "\nName             : %s\nIPAddress        : %s\nVirtualNetwork   : %s\nIsRemoteEndpoint : %t\nState            : %s\nPod              : %s\n", e.Name, e.IPAddress, e.VirtualNetwork, e.IsRemoteEndpoint, e.State, e.Pod)
	}
	return 0
}

func hnsJSON(m *Machine, name string, out, errw io.Writer) int {
	nets, eps := m.hns()
	var v any = nets
	if name == "get-hnsendpoint" {
		v = eps
	}
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		fmt.Fprintln(errw, err)
		return exitFailed
	}
	if string(b) == "null" {
		return 0 // PowerShell prints nothing for no objects
	}
	fmt.Fprintln(out, string(b))
	return 0
}

// Launch says whether line starts one of the machine's shells, as the
// seeds' 'ssh -t ... capi@<windows-ip> powershell.exe' does: powershell,
// powershell.exe, pwsh and cmd.exe on Windows; bash and sh on Linux. It
// returns the shell and the command given to it (-Command, -c or /c), ""
// for an interactive one.
func (m *Machine) Launch(line string) (sh sshd.Shell, command string, ok bool) {
	args, err := split(strings.TrimSpace(line))
	if err != nil || len(args) == 0 {
		return nil, "", false
	}
	name := args[0]
	if m.Disk.Windows {
		name = strings.ToLower(strings.TrimSuffix(strings.ToLower(name), ".exe"))
	}
	sub := *m
	var flags map[string]bool
	switch {
	case m.Disk.Windows && (name == "powershell" || name == "pwsh"):
		sub.cmd = false
		flags = map[string]bool{"-command": true, "-c": true}
	case m.Disk.Windows && name == "cmd":
		sub.cmd = true
		flags = map[string]bool{"/c": true, "/k": false}
	case !m.Disk.Windows && (name == "bash" || name == "sh" || name == "/bin/bash" || name == "/bin/sh" || name == "/usr/bin/bash"):
		flags = map[string]bool{"-c": true}
	default:
		return nil, "", false
	}
	rest := args[1:]
	// Flags that change nothing the simulation does (-NoLogo, -NoProfile,
	// -l, --login) are passed over; a command flag takes the rest.
	for i, a := range rest {
		key := a
		if m.Disk.Windows {
			key = strings.ToLower(a)
		}
		if flags[key] {
			return &sub, strings.Join(rest[i+1:], " "), true
		}
		if m.Disk.Windows && name != "cmd" && encodedCommandFlag(key) && i+1 < len(rest) {
			return &sub, decodeCommand(rest[i+1]), true
		}
	}
	return &sub, "", true
}

// encodedCommandFlag: PowerShell takes -EncodedCommand by any prefix that
// is not ambiguous (-e, -en, -enc, ...) and by its alias -ec.
func encodedCommandFlag(key string) bool {
	return key == "-ec" || len(key) >= 2 && strings.HasPrefix("-encodedcommand", key)
}

// decodeCommand is -EncodedCommand's argument: base64 of the command's
// UTF-16LE. A value that is not is left as it is, which the shell then
// refuses as a command it cannot run.
func decodeCommand(arg string) string {
	raw, err := base64.StdEncoding.DecodeString(arg)
	if err != nil || len(raw)%2 != 0 {
		return arg
	}
	u := make([]uint16, len(raw)/2)
	for i := range u {
		u[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
	}
	return string(utf16.Decode(u))
}

// Prompt is the shell's prompt for the user.
func (m *Machine) Prompt() string {
	if m.cmd {
		return m.Disk.Home() + ">"
	}
	if m.Disk.Windows {
		return "PS " + m.Disk.Home() + "> "
	}
	return m.Disk.User + "@" + m.Hostname + ":~$ "
}

// Interactive runs a login shell on a terminal until exit or end of input
// and returns the last command's status.
func (m *Machine) Interactive(rw io.ReadWriter) int {
	t := term.NewTerminal(rw, m.Prompt())
	fmt.Fprintf(t, "winkube emulated machine %s: a simulation with no operating system behind it. Commands: %s, exit.\n", m.Hostname, m.names())
	status := 0
	for {
		line, err := t.ReadLine()
		if err != nil {
			return status
		}
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "exit" || f[0] == "logout") {
			return status
		}
		status = m.Run(line, t, t)
	}
}
