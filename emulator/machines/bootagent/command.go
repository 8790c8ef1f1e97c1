package bootagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// shell runs the runcmd script's lines. Its policy, so that nothing is
// faked:
//   - "A && B", "A || B": B runs by A's status, as in sh and cmd.exe.
//   - "exit [N]" ends the script with N.
//   - "kubeadm ..." is the machine runtime's (Agent.Kubeadm).
//   - "echo TEXT > PATH" (and >>) writes the file: its effect is known.
//   - "true", "false".
//   - a script run by powershell, bash, sh or by its path: when the file is
//     not on the disk, the interpreter's error and status; when it is, its
//     content is not run (the runtime does not interpret scripts), which
//     the log says, and it succeeds.
//   - anything else is logged as not simulated and succeeds: the runtime
//     cannot know what it does, and failing it would invent a failure.
type shell struct {
	agent      *Agent
	status     int
	line       int
	kubeadmRan bool
}

// run runs one script line and says whether the script exited.
func (s *shell) run(ctx context.Context, line string) (exited bool) {
	parts, ops := splitChain(line)
	for i, p := range parts {
		if i > 0 && (ops[i-1] == "&&" && s.status != 0 || ops[i-1] == "||" && s.status == 0) {
			continue
		}
		if code, ok := exitCode(p, s.status); ok {
			s.status = code
			return true
		}
		s.status = s.simple(ctx, strings.TrimSpace(p))
	}
	return false
}

// splitChain splits a line at && and || outside quotes.
func splitChain(line string) (parts, ops []string) {
	var quote byte
	start := 0
	for i := 0; i < len(line)-1; i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case (c == '&' || c == '|') && line[i+1] == c:
			parts, ops = append(parts, line[start:i]), append(ops, line[i:i+2])
			start = i + 2
			i++
		}
	}
	return append(parts, line[start:]), ops
}

// exitCode reads "exit", "exit N" and cmd.exe's "exit /b N".
func exitCode(cmd string, last int) (int, bool) {
	f := strings.Fields(cmd)
	if len(f) == 0 || !strings.EqualFold(f[0], "exit") {
		return 0, false
	}
	f = f[1:]
	if len(f) > 0 && strings.EqualFold(f[0], "/b") {
		f = f[1:]
	}
	if len(f) == 0 {
		return last, true
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 2, true // sh: "Illegal number"
	}
	return n, true
}

func (s *shell) simple(ctx context.Context, cmd string) int {
	f := strings.Fields(cmd)
	if len(f) == 0 {
		return s.status
	}
	a := s.agent
	switch strings.ToLower(f[0]) {
	case "kubeadm", "kubeadm.exe":
		s.kubeadmRan = true
		return a.Kubeadm(ctx, f[1:], a.output)
	case "true":
		return 0
	case "false":
		return 1
	case "echo":
		if code, ok := s.redirect(cmd); ok {
			return code
		}
	case "powershell", "powershell.exe", "pwsh":
		if code, ok := s.powershell(f[1:]); ok {
			return code
		}
	case "bash", "sh":
		if len(f) > 1 && !strings.HasPrefix(f[1], "-") {
			return s.scriptFile(f[0], f[1])
		}
	default:
		if isScriptPath(f[0]) {
			return s.scriptFile("", f[0])
		}
	}
	a.output(fmt.Sprintf("winkube: not simulated (its effect on this machine is unknown, taken as succeeded): %s", cmd))
	return 0
}

// redirect carries out "echo TEXT > PATH".
func (s *shell) redirect(cmd string) (int, bool) {
	appendTo := strings.Contains(cmd, ">>")
	text, path, ok := strings.Cut(strings.Replace(cmd, ">>", ">", 1), ">")
	if !ok {
		return 0, false
	}
	text = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "echo"))
	path = strings.Trim(strings.TrimSpace(path), `"'`)
	a := s.agent
	p, err := a.Disk.HostPath(path)
	if err == nil {
		if _, serr := os.Stat(filepath.Dir(p)); serr != nil {
			err = serr
		}
	}
	if err != nil {
		if a.Windows {
			a.output("The system cannot find the path specified.")
			return 1, true
		}
		// dash: "<script>: <line>: cannot create <path>: Directory nonexistent"
		a.output(fmt.Sprintf("%s: %d: cannot create %s: Directory nonexistent", runcmdScript, s.line, path))
		return 2, true
	}
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	fh, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		a.output(err.Error())
		return 1, true
	}
	defer fh.Close()
	nl := "\n"
	if a.Windows {
		nl = "\r\n"
	}
	_, _ = fh.WriteString(text + nl)
	return 0, true
}

// powershell runs "powershell [-options] [-File] SCRIPT" when SCRIPT is a
// file; an inline -Command is not simulated.
func (s *shell) powershell(args []string) (int, bool) {
	file := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case strings.EqualFold(arg, "-File") || strings.EqualFold(arg, "-f"):
			file = true
		case strings.EqualFold(arg, "-Command") || strings.EqualFold(arg, "-c"):
			return 0, false
		case strings.EqualFold(arg, "-ExecutionPolicy") || strings.EqualFold(arg, "-ep"):
			i++
		case strings.HasPrefix(arg, "-"):
		default:
			if !strings.HasSuffix(strings.ToLower(strings.Trim(arg, `"'`)), ".ps1") {
				return 0, false
			}
			return s.ps1(strings.Trim(arg, `"'`), file), true
		}
	}
	return 0, false
}

// ps1 is Windows PowerShell 5.1 given a script that may be missing. Its
// messages: -File's "does not exist" (exit -196608) and, for a path given
// as a command, CommandNotFoundException's "is not recognized" (exit 1);
// PowerShell/PowerShell src/System.Management.Automation/resources
// (DiscoveryExceptions.resx, CommandNotFoundException) and
// src/Microsoft.PowerShell.ConsoleHost/resources/CommandLineParameterParserStrings.resx
// (ArgumentFileDoesNotExist) carry the same texts for pwsh.
func (s *shell) ps1(path string, asFile bool) int {
	if s.exists(path) {
		s.agent.output(fmt.Sprintf("winkube: %s is on the disk; its content is not run by the simulation (taken as succeeded)", path))
		return 0
	}
	if asFile {
		s.agent.output(fmt.Sprintf("The argument '%s' to the -File parameter does not exist. Provide the path to an existing '.ps1' file as an argument to the -File parameter.", path))
		return -196608
	}
	s.agent.output(fmt.Sprintf("%s : The term '%s' is not recognized as the name of a cmdlet, function, script file, or operable program. Check the spelling of the name, or if a path was included, verify that the path is correct and try again.", path, path))
	s.agent.output("    + CategoryInfo          : ObjectNotFound: (" + path + ":String) [], CommandNotFoundException")
	s.agent.output("    + FullyQualifiedErrorId : CommandNotFoundException")
	return 1
}

// scriptFile runs a script by its interpreter (bash, sh) or its path.
func (s *shell) scriptFile(interp, path string) int {
	a := s.agent
	if s.exists(path) {
		a.output(fmt.Sprintf("winkube: %s is on the disk; its content is not run by the simulation (taken as succeeded)", path))
		return 0
	}
	switch {
	case a.Windows:
		// cmd.exe for a command it cannot find.
		a.output(fmt.Sprintf("'%s' is not recognized as an internal or external command,", path))
		a.output("operable program or batch file.")
		return 9009
	case interp == "bash":
		a.output(fmt.Sprintf("bash: %s: No such file or directory", path))
		return 127
	case interp == "sh":
		a.output(fmt.Sprintf("sh: 0: cannot open %s: No such file", path))
		return 2
	}
	a.output(fmt.Sprintf("%s: %d: %s: not found", runcmdScript, s.line, path))
	return 127
}

func (s *shell) exists(path string) bool {
	p, err := s.agent.Disk.HostPath(path)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}

func isScriptPath(word string) bool {
	w := strings.ToLower(word)
	for _, ext := range []string{".sh", ".ps1", ".cmd", ".bat"} {
		if strings.HasSuffix(w, ext) {
			return true
		}
	}
	return false
}
