package ctrshell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// wget is busybox's wget applet as a Linux container's shell runs it,
// connecting from the pod's network (Container.Dial). Its options and
// messages follow busybox's networking/wget.c and libbb/xconnect.c at
// mirror/busybox 371fe9f71d445d18be28c82a2a6d82115c8af19d (July 2024,
// after 1_36_1): the options -q, -O FILE (- for stdout), -T SEC, -S; an
// output file that exists is refused unless -O names it (O_EXCL); a
// refused or unreachable connection dies with "can't connect to remote
// host (IP): <errno text>", -T's expiry with "download timed out", a
// status other than 2xx/3xx with "server returned error: <status
// line>", a name it cannot resolve with "bad address '<host>'"; every
// failure exits 1 (busybox's xfunc_error_retval). Names are not resolved
// here: the simulated pod has no cluster DNS, so a name is a bad address.
func (s *session) wget(args []string) int {
	var quiet, headers, toStdout bool
	out, timeout := "", 0
	var urls []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			urls = append(urls, a)
			continue
		}
		switch a {
		case "--quiet":
			quiet = true
			continue
		case "--server-response":
			headers = true
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a, "=")
			if !hasVal && (name == "--output-document" || name == "--timeout") {
				if i+1 >= len(args) {
					return s.wgetUsage()
				}
				i++
				val = args[i]
			}
			switch name {
			case "--output-document":
				out = val
			case "--timeout":
				n, err := strconv.Atoi(val)
				if err != nil {
					s.errorln("wget: invalid number '" + val + "'")
					return 1
				}
				timeout = n
			default:
				s.errorln("wget: winkube's simulated wget answers only -q, -O FILE, -T SEC and -S, not " + name)
				return 1
			}
			continue
		}
		// Clustered short options: "-qO-", "-qO", "file", "-T5".
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 'q':
				quiet = true
			case 'S':
				headers = true
			case 'O', 'T':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return s.wgetUsage()
					}
					i++
					val = args[i]
				}
				if c == 'O' {
					out = val
				} else {
					n, err := strconv.Atoi(val)
					if err != nil {
						s.errorln("wget: invalid number '" + val + "'")
						return 1
					}
					timeout = n
				}
				j = len(a)
			default:
				s.errorln("wget: winkube's simulated wget answers only -q, -O FILE, -T SEC and -S, not -" + string(c))
				return 1
			}
		}
	}
	if len(urls) == 0 {
		return s.wgetUsage()
	}
	toStdout = out == "-"
	for _, raw := range urls {
		if code := s.wgetOne(raw, out, toStdout, quiet, headers, timeout); code != 0 {
			return code
		}
	}
	return 0
}

func (s *session) wgetUsage() int {
	s.errorln("BusyBox v1.37.0 multi-call binary." + s.nl + s.nl + "Usage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] [--header STR]" + s.nl +
		"\t[--post-data STR | --post-file FILE] [-Y on/off]" + s.nl + "\t[-P DIR] [-U AGENT] [-T SEC] URL...")
	return 1
}

func (s *session) wgetOne(raw, out string, toStdout, quiet, headers bool, timeout int) int {
	die := func(msg string) int {
		s.errorln("wget: " + msg)
		return 1
	}
	var host, port, rest string
	switch {
	case strings.HasPrefix(raw, "http://"):
		host, port, rest = raw[len("http://"):], "80", ""
	case strings.HasPrefix(raw, "https://"):
		return die("winkube's simulated wget speaks plain http only: " + raw)
	default:
		return die("not an http or ftp url: " + raw)
	}
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host, rest = host[:i], host[i:]
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		host, port = h, p
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	ip := net.ParseIP(host)
	if ip == nil {
		return die("bad address '" + host + "'")
	}
	if out == "" {
		out = path.Base(strings.SplitN(strings.SplitN(rest, "?", 2)[0], "#", 2)[0])
		if out == "" || out == "/" || out == "." {
			out = "index.html"
		}
		if s.c.FS.Exists(out, s.cwd) {
			return die("can't open '" + out + "': File exists")
		}
	}
	addr := net.JoinHostPort(ip.String(), port)
	if !quiet {
		s.errorln("Connecting to " + host + " (" + addr + ")")
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout)*time.Second)
		defer cancel()
	}
	if s.c.Dial == nil {
		return die("can't connect to remote host (" + ip.String() + "): Network is unreachable")
	}
	conn, err := s.c.Dial(ctx, addr)
	if err != nil {
		if timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
			return die("download timed out")
		}
		return die("can't connect to remote host (" + ip.String() + "): " + errnoText(err, timeout > 0))
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	reqPath := rest
	if reqPath == "" || reqPath[0] != '/' {
		reqPath = "/" + reqPath
	}
	if i := strings.IndexByte(reqPath, '#'); i >= 0 {
		reqPath = reqPath[:i]
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(host, port)+reqPath, nil)
	if err != nil {
		return die("not an http or ftp url: " + raw)
	}
	if port == "80" {
		req.Host = host
	}
	req.Header.Set("User-Agent", "Wget")
	req.Close = true
	if err := req.Write(conn); err != nil {
		return die(timedOut(err, "error getting response: "+errnoText(err, timeout > 0)))
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return die(timedOut(err, "error getting response: "+errnoText(err, timeout > 0)))
	}
	defer resp.Body.Close()
	status := "HTTP/" + strconv.Itoa(resp.ProtoMajor) + "." + strconv.Itoa(resp.ProtoMinor) + " " + resp.Status
	if headers {
		s.errorln("  " + status)
		names := make([]string, 0, len(resp.Header))
		for k := range resp.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			for _, v := range resp.Header[k] {
				s.errorln("  " + k + ": " + v)
			}
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 400 || resp.StatusCode == 206 {
		return die("server returned error: " + status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return die(timedOut(err, "error getting response: "+errnoText(err, timeout > 0)))
	}
	if toStdout {
		if !quiet {
			s.errorln("writing to stdout")
		}
		_, _ = s.out.Write(body)
		if !quiet {
			s.errorln("written to stdout")
		}
		return 0
	}
	if !quiet {
		s.errorln("saving to '" + out + "'")
	}
	if err := s.write(out, body, false); err != nil {
		return die("can't open '" + out + "': " + errText(err))
	}
	if !quiet {
		s.errorln("'" + out + "' saved")
	}
	return 0
}

// timedOut is -T's expiry while reading ("download timed out"), else msg.
func timedOut(err error, msg string) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "download timed out"
	}
	return msg
}

// errnoText is the C library's text for a failed connect (strerror), read
// from the dial error the pod's network gave.
func errnoText(err error, _ bool) string {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "refused"):
		return "Connection refused"
	case strings.Contains(msg, "no route"):
		return "No route to host"
	case strings.Contains(msg, "unreachable"):
		return "Network is unreachable"
	case strings.Contains(msg, "reset"):
		return "Connection reset by peer"
	case strings.Contains(msg, "timed out") || strings.Contains(msg, "timeout"):
		return "Connection timed out"
	}
	return fmt.Sprint(err)
}
