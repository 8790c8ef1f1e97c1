package ctrshell

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// The Linux shells: busybox's ash (busybox images), dash as /bin/sh and
// bash (Debian images). Their messages for a command they cannot find and
// a file they cannot open differ; these are the shells' as users report
// them (busybox ash "sh: X: not found", dash "sh: 1: X: not found", bash
// "bash: X: command not found", each exit status 127 as POSIX requires
// for a command not found: XCU 2.8.2), not verified against the shells'
// sources here.

func (s *session) busybox() bool { return s.c.FS.Exists("/bin/busybox", "/") }

// shMain is `sh`, `sh -c LINE` or `bash ...`.
func (s *session) shMain(name string, args []string) int {
	if name == "busybox" {
		if len(args) == 0 {
			s.errorln("winkube: busybox's applets answer here as the shell's commands: " + Answers)
			return 1
		}
		name, args = args[0], args[1:]
		if name != "sh" && name != "ash" {
			return s.shCommand(append([]string{name}, args...))
		}
	}
	s.shName = name
	if len(args) >= 2 && args[0] == "-c" {
		s.shLine(args[1])
		return s.code
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		s.errorln(s.shPrefix() + "can't open '" + args[0] + "': winkube's simulated shell runs no scripts")
		return 2
	}
	for !s.exited {
		if s.tty {
			fmt.Fprint(s.out, s.shPrompt())
		}
		line, ok := s.readLine()
		if !ok {
			break
		}
		s.shLine(line)
	}
	return s.code
}

func (s *session) shPrompt() string {
	if s.shName == "bash" {
		return "root@" + s.c.Hostname + ":" + s.cwd + "# "
	}
	if s.busybox() {
		return s.cwd + " # "
	}
	return "# "
}

// shPrefix is what the shell puts before its own error messages.
func (s *session) shPrefix() string {
	switch {
	case s.shName == "bash":
		return "bash: "
	case s.busybox():
		return "sh: "
	}
	return "sh: 1: "
}

func (s *session) shLine(line string) {
	for _, part := range splitTop(line, ';') {
		ands := strings.Split(part, "&&")
		for i, a := range ands {
			if s.exited {
				return
			}
			if strings.TrimSpace(a) == "" {
				continue
			}
			s.code = s.shSimple(a)
			if s.code != 0 && i < len(ands)-1 {
				break
			}
		}
	}
}

func (s *session) shSimple(line string) int {
	cmd, file, appendTo := redirect(line)
	words := s.shWords(cmd)
	if len(words) == 0 {
		return 0
	}
	if file == "" {
		return s.shCommand(words)
	}
	var code int
	written := s.capture("\n", func() { code = s.shCommand(words) })
	if err := s.write(file, written, appendTo); err != nil {
		if s.busybox() {
			s.errorln(s.shPrefix() + "can't create " + file + ": " + errText(err))
		} else {
			s.errorln(s.shPrefix() + "cannot create " + file + ": " + errText(err))
		}
		return 1
	}
	return code
}

func (s *session) write(file string, data []byte, appendTo bool) error {
	if s.c.FS.IsDir(file, s.cwd) {
		return errIsDir
	}
	if appendTo {
		return s.c.FS.AppendFile(file, s.cwd, data)
	}
	_, err := s.c.FS.WriteFile(file, s.cwd, data)
	return err
}

var errIsDir = errors.New("is a directory")

func errText(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, errIsDir):
		return "Is a directory"
	case errors.As(err, &pe) && pe.Err.Error() == "read-only file system":
		return "Read-only file system"
	}
	return err.Error()
}

// shWords splits a command into words, expanding $X and ${X} outside
// single quotes.
func (s *session) shWords(line string) []string {
	var words []string
	var cur strings.Builder
	in := false
	inS, inD := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' && !inD:
			inS, in = !inS, true
		case c == '"' && !inS:
			inD, in = !inD, true
		case c == '$' && !inS && i+1 < len(line):
			name, n := varName(line[i+1:])
			if name == "" {
				cur.WriteByte(c)
				continue
			}
			v, _ := s.getenv(name)
			cur.WriteString(v)
			in = true
			i += n
		case (c == ' ' || c == '\t') && !inS && !inD:
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// varName is the variable a "$" starts ("X" of "X..." or "{X}"), and how
// many bytes it took.
func varName(s string) (string, int) {
	if strings.HasPrefix(s, "{") {
		if end := strings.IndexByte(s, '}'); end > 1 {
			return s[1:end], end + 1
		}
		return "", 0
	}
	n := 0
	for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || n > 0 && s[n] >= '0' && s[n] <= '9') {
		n++
	}
	return s[:n], n
}

// shCommand runs one command: a builtin of the shell, or one of the
// image's programs the simulation answers for (ls, cat, env, ...).
func (s *session) shCommand(w []string) int {
	name, args := w[0], w[1:]
	if k, v, ok := strings.Cut(name, "="); ok && k != "" && len(args) == 0 && !strings.Contains(k, "/") {
		s.setenv(k, v)
		return 0
	}
	switch name {
	case "exit":
		s.exited = true
		if len(args) > 0 {
			n, _ := strconv.Atoi(args[0])
			return n
		}
		return s.code
	case "cd":
		dir := "/"
		if h, ok := s.getenv("HOME"); ok && h != "" {
			dir = h
		}
		if len(args) > 0 {
			dir = args[0]
		}
		if !s.c.FS.IsDir(dir, s.cwd) {
			if s.busybox() {
				s.errorln(s.shPrefix() + "cd: can't cd to " + dir + ": No such file or directory")
			} else {
				s.errorln(s.shPrefix() + "cd: " + dir + ": No such file or directory")
			}
			return 1
		}
		s.cwd = s.c.FS.Norm(dir, s.cwd)
		return 0
	case "export":
		for _, a := range args {
			if k, v, ok := strings.Cut(a, "="); ok {
				s.setenv(k, v)
			}
		}
		return 0
	case "unset":
		for _, a := range args {
			s.unsetenv(a)
		}
		return 0
	case "true", ":":
		return 0
	case "false":
		return 1
	case "echo":
		nl := true
		if len(args) > 0 && args[0] == "-n" {
			nl, args = false, args[1:]
		}
		fmt.Fprint(s.out, strings.Join(args, " "))
		if nl {
			fmt.Fprint(s.out, s.nl)
		}
		return 0
	}
	// What follows are programs of the image, run only where it has
	// them.
	if _, ok := s.find(name); !ok {
		if s.shName == "bash" {
			s.errorln(s.shPrefix() + name + ": command not found")
		} else {
			s.errorln(s.shPrefix() + name + ": not found")
		}
		return 127
	}
	switch name {
	case "pwd":
		s.println(s.cwd)
	case "hostname":
		s.println(s.c.Hostname)
	case "env", "printenv":
		if len(args) == 0 {
			for _, kv := range s.environ(false) {
				s.println(kv)
			}
			return 0
		}
		if name == "env" {
			s.errorln("env: winkube's simulated shell runs no program: " + args[0])
			return 127
		}
		code := 0
		for _, a := range args {
			if v, ok := s.getenv(a); ok {
				s.println(v)
			} else {
				code = 1
			}
		}
		return code
	case "cat":
		code := 0
		for _, a := range args {
			if s.c.FS.IsDir(a, s.cwd) {
				s.errorln("cat: " + a + ": Is a directory")
				code = 1
				continue
			}
			data, err := s.c.FS.ReadFile(a, s.cwd)
			if err != nil {
				s.errorln("cat: " + a + ": " + errText(err))
				code = 1
				continue
			}
			fmt.Fprint(s.out, string(data))
		}
		return code
	case "ls":
		return s.ls(args)
	case "wget":
		if s.busybox() {
			return s.wget(args)
		}
		s.errorln(fmt.Sprintf("winkube: %s is in the container's image but is not simulated; the shell answers only %s", name, Answers))
		return 126
	case "mkdir":
		code := 0
		for _, a := range args {
			if a == "-p" {
				continue
			}
			if s.c.FS.Exists(a, s.cwd) {
				if !contains(args, "-p") {
					s.errorln("mkdir: can't create directory '" + a + "': File exists")
					code = 1
				}
				continue
			}
			if err := s.c.FS.Mkdir(a, s.cwd); err != nil {
				s.errorln("mkdir: can't create directory '" + a + "': " + errText(err))
				code = 1
			}
		}
		return code
	default:
		s.errorln(fmt.Sprintf("winkube: %s is in the container's image but is not simulated; the shell answers only %s", name, Answers))
		return 126
	}
	return 0
}

func contains(list []string, x string) bool {
	for _, a := range list {
		if a == x {
			return true
		}
	}
	return false
}

func (s *session) ls(args []string) int {
	long := false
	var paths []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			long = long || strings.Contains(a, "l")
			continue
		}
		paths = append(paths, a)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	code := 0
	for i, p := range paths {
		if !s.c.FS.Exists(p, s.cwd) {
			if s.busybox() {
				s.errorln("ls: " + p + ": No such file or directory")
			} else {
				s.errorln("ls: cannot access '" + p + "': No such file or directory")
			}
			code = 2
			continue
		}
		if !s.c.FS.IsDir(p, s.cwd) {
			s.println(p)
			continue
		}
		if len(paths) > 1 {
			if i > 0 {
				s.println()
			}
			s.println(p + ":")
		}
		entries, _ := s.c.FS.List(p, s.cwd)
		for _, e := range entries {
			if !long {
				s.println(e.Name)
				continue
			}
			mode := "-rw-r--r--"
			if e.Dir {
				mode = "drwxr-xr-x"
			}
			s.println(fmt.Sprintf("%s    1 root     root     %8d %s", mode, e.Size, e.Name))
		}
	}
	return code
}
