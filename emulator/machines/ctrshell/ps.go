package ctrshell

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Windows PowerShell 5.1 (and pwsh where an image has it). The error
// records are laid out as Windows PowerShell 5.1 prints them in users'
// transcripts (the CommandNotFoundException text, "At line:1 char:1",
// CategoryInfo, FullyQualifiedErrorId); not verified against a source.
// `powershell -Command` exits 1 when the last command failed.

func (s *session) psMain(args []string) int {
	for i := 0; i < len(args); i++ {
		switch strings.ToLower(args[i]) {
		case "-command", "-c":
			s.psLine(strings.Join(args[i+1:], " "))
			return s.psExit()
		case "-nologo", "-noprofile", "-noninteractive", "-nop":
		case "-executionpolicy", "-ep":
			i++
		default:
			if !strings.HasPrefix(args[i], "-") {
				s.psLine(strings.Join(args[i:], " "))
				return s.psExit()
			}
		}
	}
	for !s.exited {
		if s.tty {
			fmt.Fprint(s.out, "PS "+s.cwd+"> ")
		}
		line, ok := s.readLine()
		if !ok {
			break
		}
		s.psLine(line)
	}
	return s.psExit()
}

func (s *session) psExit() int {
	if s.exited {
		return s.code
	}
	if s.code != 0 {
		return 1
	}
	return 0
}

var psEnvRef = regexp.MustCompile(`(?i)\$env:([A-Za-z_][A-Za-z0-9_]*)`)

func (s *session) psExpand(str string) string {
	return psEnvRef.ReplaceAllStringFunc(str, func(m string) string {
		v, _ := s.getenv(m[5:])
		return v
	})
}

// psWords splits a command into words: '...' literal, "..." and bare
// words with $env:X expanded.
func (s *session) psWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, inS, inD := false, false, false
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' && !inD:
			inS, in = !inS, true
		case c == '"' && !inS:
			inD, in = !inD, true
		case (c == ' ' || c == '\t') && !inS && !inD:
			flush()
		case c == '$' && !inS:
			m := psEnvRef.FindString(line[i:])
			if m != "" && strings.HasPrefix(line[i:], m) {
				cur.WriteString(s.psExpand(m))
				i += len(m) - 1
				in = true
				continue
			}
			cur.WriteByte(c)
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return words
}

func (s *session) psLine(line string) {
	for _, part := range splitTop(line, ';') {
		if s.exited {
			return
		}
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if ok := s.psStatement(part); ok {
			s.code = 0
		} else {
			s.code = 1
		}
	}
}

var psAssign = regexp.MustCompile(`(?i)^\$env:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)

// psStatement runs one pipeline; false when it wrote an error.
func (s *session) psStatement(line string) bool {
	if m := psAssign.FindStringSubmatch(line); m != nil {
		w := s.psWords(m[2])
		s.setenv(m[1], strings.Join(w, " "))
		return true
	}
	// "text" | Out-File f, | Set-Content f, | Add-Content f
	if pipe := splitTop(line, '|'); len(pipe) == 2 {
		var ok bool
		written := s.capture("\r\n", func() { ok = s.psCommand(strings.TrimSpace(pipe[0])) })
		if !ok {
			return false
		}
		w := s.psWords(strings.TrimSpace(pipe[1]))
		if len(w) == 0 {
			return true
		}
		switch strings.ToLower(w[0]) {
		case "out-file", "set-content", "add-content", "ac", "sc":
			path := psParam(w[1:], "-filepath", "-path")
			appendTo := strings.EqualFold(w[0], "add-content") || strings.EqualFold(w[0], "ac") || contains(lower(w[1:]), "-append")
			return s.psWrite(w[0], path, written, appendTo)
		}
		return s.psNotFound(w[0], line)
	}
	cmd, file, appendTo := redirect(line)
	if file == "" {
		return s.psCommand(cmd)
	}
	var ok bool
	written := s.capture("\r\n", func() { ok = s.psCommand(cmd) })
	return s.psWrite("out-file", file, written, appendTo) && ok
}

func lower(w []string) []string {
	out := make([]string, len(w))
	for i, a := range w {
		out[i] = strings.ToLower(a)
	}
	return out
}

// psParam is a named parameter's value, or else the first positional word.
func psParam(args []string, names ...string) string {
	for i := 0; i+1 < len(args); i++ {
		for _, n := range names {
			if strings.EqualFold(args[i], n) {
				return args[i+1]
			}
		}
	}
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			if !strings.EqualFold(args[i], "-append") && !strings.EqualFold(args[i], "-force") {
				i++
			}
			continue
		}
		return args[i]
	}
	return ""
}

func (s *session) psWrite(cmdlet, path string, data []byte, appendTo bool) bool {
	if err := s.write(path, data, appendTo); err != nil {
		full := s.c.FS.Norm(path, s.cwd)
		switch errText(err) {
		case "No such file or directory":
			s.psError(cmdlet, fmt.Sprintf("Could not find a part of the path '%s'.", full), cmdlet, "OpenError: (:) [Out-File], DirectoryNotFoundException", "FileOpenFailure")
		default:
			s.psError(cmdlet, fmt.Sprintf("Access to the path '%s' is denied.", full), cmdlet, "OpenError: (:) [Out-File], UnauthorizedAccessException", "FileOpenFailure")
		}
		return false
	}
	return true
}

func (s *session) psError(cmd, msg, line, category, id string) {
	s.errorln(cmd + " : " + msg)
	s.errorln("At line:1 char:1")
	s.errorln("+ " + line)
	s.errorln("+ " + strings.Repeat("~", max(1, len(cmd))))
	s.errorln("    + CategoryInfo          : " + category)
	s.errorln("    + FullyQualifiedErrorId : " + id)
	s.errorln()
}

func (s *session) psNotFound(name, line string) bool {
	s.psError(name, fmt.Sprintf("The term '%s' is not recognized as the name of a cmdlet, function, script file, or operable program. Check the spelling of the name, or if a path was included, verify that the path is correct and try again.", name),
		line, fmt.Sprintf("ObjectNotFound: (%s:String) [], CommandNotFoundException", name), "CommandNotFoundException")
	return false
}

func (s *session) psPathNotFound(cmdlet, p, line string) bool {
	full := s.c.FS.Norm(p, s.cwd)
	s.psError(cmdlet, fmt.Sprintf("Cannot find path '%s' because it does not exist.", full), line,
		fmt.Sprintf("ObjectNotFound: (%s:String) [%s], ItemNotFoundException", full, cmdlet), "PathNotFound,Microsoft.PowerShell.Commands."+strings.ReplaceAll(cmdlet, "-", "")+"Command")
	return false
}

func (s *session) psCommand(line string) bool {
	w := s.psWords(line)
	if len(w) == 0 {
		return true
	}
	// A bare string or variable is written to the output.
	if t := strings.TrimSpace(line); strings.HasPrefix(t, `"`) || strings.HasPrefix(t, `'`) || strings.HasPrefix(t, "$") {
		s.println(strings.Join(w, " "))
		return true
	}
	name, args := w[0], w[1:]
	switch strings.ToLower(name) {
	case "exit":
		s.exited = true
		if len(args) > 0 {
			n, _ := strconv.Atoi(args[0])
			s.code = n
		}
		return s.code == 0
	case "write-output", "echo", "write":
		for _, a := range args {
			s.println(a)
		}
	case "write-host":
		s.println(strings.Join(args, " "))
	case "hostname", "hostname.exe":
		s.println(s.c.Hostname)
	case "get-location", "pwd", "gl":
		s.println()
		s.println("Path")
		s.println("----")
		s.println(s.cwd)
		s.println()
	case "set-location", "cd", "sl", "chdir":
		p := psParam(args, "-path", "-literalpath")
		if p == "" {
			return true
		}
		if !s.c.FS.IsDir(p, s.cwd) {
			return s.psPathNotFound("Set-Location", p, line)
		}
		s.cwd = s.c.FS.Norm(p, s.cwd)
	case "get-content", "gc", "cat", "type":
		p := psParam(args, "-path", "-literalpath")
		data, err := s.c.FS.ReadFile(p, s.cwd)
		if err != nil || s.c.FS.IsDir(p, s.cwd) {
			return s.psPathNotFound("Get-Content", p, line)
		}
		text := strings.TrimRight(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
		for _, l := range strings.Split(text, "\n") {
			s.println(l)
		}
	case "set-content", "add-content", "out-file", "sc", "ac":
		p := psParam(args, "-path", "-filepath")
		v := psParam(args, "-value", "-inputobject")
		if v == p {
			v = ""
			for i := len(args) - 1; i > 0; i-- {
				if !strings.HasPrefix(args[i-1], "-") && args[i] != p {
					v = args[i]
					break
				}
			}
		}
		appendTo := strings.EqualFold(name, "add-content") || strings.EqualFold(name, "ac")
		return s.psWrite(name, p, []byte(v+"\r\n"), appendTo)
	case "new-item", "ni", "mkdir", "md":
		p := psParam(args, "-path", "-name")
		isDir := strings.EqualFold(name, "mkdir") || strings.EqualFold(name, "md") || strings.EqualFold(psParam(args, "-itemtype", "-type"), "directory")
		if !isDir {
			return s.psWrite("New-Item", p, nil, false)
		}
		if s.c.FS.Exists(p, s.cwd) {
			full := s.c.FS.Norm(p, s.cwd)
			s.psError("New-Item", fmt.Sprintf("An item with the specified name %s already exists.", full), line, fmt.Sprintf("ResourceExists: (%s:String) [New-Item], IOException", full), "DirectoryExist,Microsoft.PowerShell.Commands.NewItemCommand")
			return false
		}
		if err := s.c.FS.Mkdir(p, s.cwd); err != nil {
			return s.psWrite("New-Item", p, nil, false)
		}
		s.psListing(s.c.FS.Norm(p+`\..`, s.cwd), []entryView{{name: lastName(s.c.FS.Norm(p, s.cwd)), dir: true}})
	case "get-childitem", "gci", "ls", "dir":
		p := psParam(args, "-path", "-literalpath")
		if strings.EqualFold(strings.TrimRight(p, `\`), "env:") {
			s.psEnv()
			return true
		}
		if p == "" {
			p = "."
		}
		if !s.c.FS.Exists(p, s.cwd) {
			return s.psPathNotFound("Get-ChildItem", p, line)
		}
		entries, _ := s.c.FS.List(p, s.cwd)
		var ev []entryView
		for _, e := range entries {
			ev = append(ev, entryView{name: e.Name, dir: e.Dir, size: e.Size})
		}
		s.psListing(s.c.FS.Norm(p, s.cwd), ev)
	default:
		if _, ok := s.find(name); ok {
			s.errorln(fmt.Sprintf("winkube: %s is in the container's image but is not simulated; the shell answers only %s", name, Answers))
			return false
		}
		return s.psNotFound(name, line)
	}
	return true
}

type entryView struct {
	name string
	dir  bool
	size int64
}

func lastName(p string) string {
	i := strings.LastIndex(p, `\`)
	return p[i+1:]
}

func (s *session) psListing(dir string, entries []entryView) {
	if len(entries) == 0 {
		return
	}
	s.println()
	s.println()
	s.println("    Directory: " + dir)
	s.println()
	s.println()
	s.println("Mode                 LastWriteTime         Length Name")
	s.println("----                 -------------         ------ ----")
	for _, e := range entries {
		// The simulation keeps no file times.
		if e.dir {
			s.println(fmt.Sprintf("d-----  %20s %14s %s", "", "", e.name))
		} else {
			s.println(fmt.Sprintf("-a----  %20s %14d %s", "", e.size, e.name))
		}
	}
	s.println()
	s.println()
}

func (s *session) psEnv() {
	vars := s.environ(true)
	width := 4
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		width = max(width, len(k))
	}
	s.println()
	s.println(fmt.Sprintf("%-*s %s", width, "Name", "Value"))
	s.println(fmt.Sprintf("%-*s %s", width, "----", "-----"))
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		s.println(fmt.Sprintf("%-*s %s", width, k, v))
	}
	s.println()
}
