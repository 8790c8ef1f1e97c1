package containerruntime

import (
	"regexp"
	"strconv"
	"strings"
)

// What a shell's command line does when it only writes and exits: the
// commands a Job or a run-to-completion pod of a HostProcess container
// runs to report a result. The process's exit code is the container's:
// hcsshim runs a HostProcess container's command as a host process in a
// job object and reports that process's own exit code
// (internal/jobcontainers/process.go JobProcess.ExitCode,
// microsoft/hcsshim 0f5799e5), which containerd and the kubelet record as
// the container's; with restartPolicy Never the pod then ends Succeeded
// when every container exited 0 and Failed otherwise (pkg/kubelet/
// kubelet_pods.go getPhase, kubernetes/kubernetes df5f0243). Anything a
// model here does not know runs as before: not modelled, it keeps running.

// cmd is cmd.exe: /c (or /k) runs the rest of its command line, a
// sequence of commands joined by &, && and ||. The built-ins exit [/b]
// [code], echo and rem are carried out; another command is found as cmd
// finds one (searchPath with .com, .exe, .bat, .cmd) and run by its model
// (one no model knows, or the simulated host lacks, keeps running).
// cmd ends with the last command's exit code (its ERRORLEVEL). The
// built-ins' behaviour is cmd's own help (`cmd /?`, `exit /?`), not
// verified against a source here.
func cmd(p *Proc) Outcome {
	line, ok := "", false
	for i, a := range p.Args {
		if strings.EqualFold(a, "/c") || strings.EqualFold(a, "/k") {
			line, ok = strings.Join(p.Args[i+1:], " "), !strings.EqualFold(a, "/k")
			break
		}
	}
	if !ok {
		// An interactive cmd, or /k: it stays.
		return Outcome{State: Runs}
	}
	line = strings.TrimSpace(expandPercent(line, p.Env))
	if len(line) >= 2 && line[0] == '"' && line[len(line)-1] == '"' {
		line = line[1 : len(line)-1]
	}
	level := int32(0)
	for _, step := range cmdSequence(line) {
		if (step.op == "&&" && level != 0) || (step.op == "||" && level == 0) {
			continue
		}
		f := strings.Fields(step.cmd)
		if len(f) == 0 {
			continue
		}
		switch strings.ToLower(f[0]) {
		case "exit":
			rest := f[1:]
			if len(rest) > 0 && strings.EqualFold(rest[0], "/b") {
				rest = rest[1:]
			}
			code := int64(0)
			if len(rest) > 0 {
				// A code that is no number is 0, as cmd reads it.
				code, _ = strconv.ParseInt(rest[0], 10, 32)
			}
			return ends(int32(code))
		case "echo":
			p.Logf("%s", strings.TrimSpace(strings.TrimPrefix(step.cmd, f[0])))
			level = 0
		case "rem":
		default:
			exe, found := "", false
			for _, ext := range []string{"", ".com", ".exe", ".bat", ".cmd"} {
				if ext != "" && strings.Contains(f[0], ".") {
					break
				}
				if exe, found = searchPath(p, f[0]+ext); found {
					break
				}
			}
			if !found {
				// A real host holds many more programs (ping,
				// whoami, curl) than the simulated one lists: not
				// modelled, it runs.
				return Outcome{State: Runs}
			}
			child := *p
			child.Program, child.Args, child.log = exe, f[1:], nil
			o := run(&child)
			p.log = append(p.log, child.log...)
			switch o.State {
			case Ends, Exits:
				level = o.Code
			default:
				// It runs, waits or did not start: cmd waits with it.
				return o
			}
		}
	}
	return ends(level)
}

// expandPercent is cmd's expansion of %NAME% when it reads a line: a
// variable of the environment (names are case-insensitive on Windows) is
// replaced by its value, an undefined one is left as written (`set /?`).
func expandPercent(line string, env map[string]string) string {
	return percentRef.ReplaceAllStringFunc(line, func(m string) string {
		name := m[1 : len(m)-1]
		for k, v := range env {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return m
	})
}

var percentRef = regexp.MustCompile(`%[^%\s=]+%`)

type cmdStep struct{ op, cmd string }

// cmdSequence splits a cmd line at &, && and || outside double quotes.
func cmdSequence(line string) []cmdStep {
	var out []cmdStep
	op, cur, quoted := "", strings.Builder{}, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted = !quoted
			cur.WriteByte(c)
		case !quoted && (c == '&' || c == '|') && i+1 < len(line) && line[i+1] == c:
			out = append(out, cmdStep{op, strings.TrimSpace(cur.String())})
			op, cur = string([]byte{c, c}), strings.Builder{}
			i++
		case !quoted && c == '&':
			out = append(out, cmdStep{op, strings.TrimSpace(cur.String())})
			op, cur = "&", strings.Builder{}
		default:
			cur.WriteByte(c)
		}
	}
	return append(out, cmdStep{op, strings.TrimSpace(cur.String())})
}

// psOutputAndExit is powershell -Command with statements that only write
// (Write-Host, Write-Output, echo) and exit. `exit N` ends PowerShell with
// N; a command that ends without exit leaves 0 when its last statement
// succeeded (about_PowerShell_exe, "-Command", MicrosoftDocs/PowerShell-Docs
// reference/5.1/Microsoft.PowerShell.Core/About/about_PowerShell_exe.md,
// 31b43945). ok is false for any other command line.
func psOutputAndExit(p *Proc) (Outcome, bool) {
	text, found := "", false
	for i := 0; i < len(p.Args) && !found; i++ {
		switch strings.ToLower(p.Args[i]) {
		case "-noprofile", "-noninteractive", "-nologo":
		case "-executionpolicy":
			i++
		case "-command", "-c":
			text, found = strings.Join(p.Args[i+1:], " "), true
		default:
			return Outcome{}, false
		}
	}
	if !found {
		return Outcome{}, false
	}
	text = strings.Trim(strings.TrimSpace(text), `"`)
	var out []string
	for _, stmt := range strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == '\n' }) {
		f := strings.Fields(stmt)
		if len(f) == 0 {
			continue
		}
		switch strings.ToLower(f[0]) {
		case "exit":
			code := int64(0)
			if len(f) > 1 {
				var err error
				if code, err = strconv.ParseInt(f[1], 10, 32); err != nil {
					return Outcome{}, false // an expression: not modelled
				}
			}
			for _, l := range out {
				p.Logf("%s", l)
			}
			return ends(int32(code)), true
		case "write-host", "write-output", "echo":
			out = append(out, strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stmt), f[0])), `"'`))
		default:
			return Outcome{}, false
		}
	}
	for _, l := range out {
		p.Logf("%s", l)
	}
	return ends(0), true
}
