package ctrshell

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// cmd.exe. Its messages are cmd's own as Windows prints them (cmd is not
// open source: the wording is taken from users' transcripts and was not
// verified against a source); its ERRORLEVEL for a command it cannot find
// is 9009.

func (s *session) cmdMain(args []string) int {
	for i, a := range args {
		switch strings.ToLower(a) {
		case "/c", "/k":
			s.cmdLine(strings.Join(args[i+1:], " "))
			if strings.EqualFold(a, "/c") {
				return s.code
			}
		case "/d", "/q", "/s":
			continue
		}
	}
	for !s.exited {
		if s.tty {
			fmt.Fprint(s.out, s.nl+s.cwd+">")
		}
		line, ok := s.readLine()
		if !ok {
			break
		}
		s.cmdLine(line)
	}
	return s.code
}

var pctVar = regexp.MustCompile(`%([^%\s]+)%`)

func (s *session) cmdLine(line string) {
	line = pctVar.ReplaceAllStringFunc(line, func(m string) string {
		if v, ok := s.getenv(m[1 : len(m)-1]); ok {
			return v
		}
		if strings.EqualFold(m, "%CD%") {
			return s.cwd
		}
		if strings.EqualFold(m, "%ERRORLEVEL%") {
			return strconv.Itoa(s.code)
		}
		return m
	})
	for _, part := range strings.Split(line, "&&") {
		if s.exited {
			return
		}
		s.code = s.cmdSimple(strings.TrimSpace(part))
		if s.code != 0 {
			return
		}
	}
}

func (s *session) cmdSimple(line string) int {
	if line == "" {
		return s.code
	}
	cmd, file, appendTo := redirect(line)
	if file == "" {
		return s.cmdCommand(cmd)
	}
	var code int
	written := s.capture("\r\n", func() { code = s.cmdCommand(cmd) })
	if err := s.write(file, written, appendTo); err != nil {
		s.errorln(cmdErr(err))
		return 1
	}
	return code
}

func cmdErr(err error) string {
	switch errText(err) {
	case "No such file or directory":
		return "The system cannot find the path specified."
	case "Read-only file system", "Is a directory":
		return "Access is denied."
	}
	return err.Error()
}

func (s *session) cmdCommand(line string) int {
	name, rest, _ := strings.Cut(line, " ")
	// "echo." and "cd\" are cmd's.
	if len(name) > 4 && strings.EqualFold(name[:5], "echo.") {
		name, rest = "echo.", name[5:]+" "+rest
	}
	rest = strings.TrimSpace(rest)
	arg := strings.Trim(rest, `"`)
	switch strings.ToLower(name) {
	case "exit":
		s.exited = true
		f := strings.Fields(rest)
		if len(f) > 0 && strings.EqualFold(f[0], "/b") {
			f = f[1:]
		}
		if len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
		return s.code
	case "echo":
		if rest == "" {
			s.println("ECHO is on.")
		} else {
			s.println(rest)
		}
	case "echo.":
		s.println(strings.TrimSpace(rest))
	case "set":
		if k, v, ok := strings.Cut(rest, "="); ok {
			if v == "" {
				s.unsetenv(k)
			} else {
				s.setenv(k, v)
			}
			return 0
		}
		found := false
		for _, kv := range s.environ(true) {
			if strings.HasPrefix(strings.ToUpper(kv), strings.ToUpper(rest)) {
				s.println(kv)
				found = true
			}
		}
		if !found {
			s.println("Environment variable " + rest + " not defined")
			return 1
		}
	case "cd", "chdir":
		if strings.HasPrefix(strings.ToLower(arg), "/d") {
			arg = strings.Trim(strings.TrimSpace(arg[2:]), `"`)
		}
		if arg == "" {
			s.println(s.cwd)
			return 0
		}
		if len(arg) >= 2 && arg[1] == ':' && !strings.EqualFold(arg[:1], "c") {
			s.errorln("The system cannot find the drive specified.")
			return 1
		}
		if !s.c.FS.IsDir(arg, s.cwd) {
			s.errorln("The system cannot find the path specified.")
			return 1
		}
		s.cwd = s.c.FS.Norm(arg, s.cwd)
	case "type":
		if s.c.FS.IsDir(arg, s.cwd) {
			s.errorln("Access is denied.")
			return 1
		}
		data, err := s.c.FS.ReadFile(arg, s.cwd)
		if err != nil {
			s.errorln("The system cannot find the file specified.")
			return 1
		}
		fmt.Fprint(s.out, string(data))
	case "mkdir", "md":
		if s.c.FS.Exists(arg, s.cwd) {
			s.errorln("A subdirectory or file " + arg + " already exists.")
			return 1
		}
		if err := s.c.FS.Mkdir(arg, s.cwd); err != nil {
			s.errorln(cmdErr(err))
			return 1
		}
	case "dir":
		return s.cmdDir(arg)
	case "hostname", "hostname.exe":
		s.println(s.c.Hostname)
	case "cls", "rem":
	default:
		if _, ok := s.find(name); ok {
			s.errorln(fmt.Sprintf("winkube: %s is in the container's image but is not simulated; the shell answers only %s", name, Answers))
			return 1
		}
		s.errorln("'" + name + "' is not recognized as an internal or external command,")
		s.errorln("operable program or batch file.")
		return 9009
	}
	return 0
}

func (s *session) cmdDir(arg string) int {
	if arg == "" {
		arg = "."
	}
	if !s.c.FS.Exists(arg, s.cwd) {
		s.errorln("File Not Found")
		return 1
	}
	dir := s.c.FS.Norm(arg, s.cwd)
	s.println(" Directory of " + dir)
	s.println()
	files, dirs := 0, 0
	var total int64
	if !s.c.FS.IsDir(arg, s.cwd) {
		data, _ := s.c.FS.ReadFile(arg, s.cwd)
		s.println(fmt.Sprintf("%-24s %14d %s", "", len(data), dir))
		return 0
	}
	entries, _ := s.c.FS.List(arg, s.cwd)
	for _, e := range entries {
		if e.Dir {
			dirs++
			s.println(fmt.Sprintf("%-24s %-14s %s", "", "<DIR>", e.Name))
			continue
		}
		files++
		total += e.Size
		s.println(fmt.Sprintf("%-24s %14d %s", "", e.Size, e.Name))
	}
	s.println(fmt.Sprintf("%16d File(s) %14d bytes", files, total))
	s.println(fmt.Sprintf("%16d Dir(s)", dirs))
	return 0
}
