package vmshell

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The machine's web clients: curl on Linux (and curl.exe, which Windows
// ships since Windows Server 2019), Invoke-WebRequest in Windows
// PowerShell, where "curl" and "wget" are its aliases (PowerShell 5.1, the
// SSH shell of CAPZ's Windows images). They connect as the machine does,
// through Machine.Dial: Service ClusterIPs through the node's kube-proxy,
// pod IPs, other machines' addresses. Names are not resolved: the node's
// resolver does not know the cluster's DNS names.

// request is one HTTP request as a client's flags make it.
type request struct {
	method   string
	url      string
	headers  http.Header
	timeout  time.Duration
	insecure bool
	follow   bool
}

// fetch makes the request and returns the response with its body read.
func (m *Machine) fetch(r request) (*http.Response, []byte, error) {
	if m.Dial == nil {
		return nil, nil, errors.New("this machine has no network yet")
	}
	u, err := url.Parse(r.url)
	if err != nil || u.Host == "" {
		return nil, nil, &urlError{code: 3, msg: "URL rejected: Malformed input to a URL function"}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, nil, &urlError{code: 1, msg: fmt.Sprintf("Protocol %q not supported", u.Scheme)}
	}
	if _, err := netipParse(u.Hostname()); err != nil {
		return nil, nil, &urlError{code: 6, msg: "Could not resolve host: " + u.Hostname()}
	}
	timeout := r.timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return m.Dial(ctx, addr) },
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: r.insecure}, //nolint:gosec // curl -k, as the user asked
	}
	cl := &http.Client{Transport: tr}
	if !r.follow {
		cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, nil)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range r.headers {
		req.Header[k] = v
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp, body, err
}

type urlError struct {
	code int
	msg  string
}

func (e *urlError) Error() string { return e.msg }

func netipParse(h string) (net.IP, error) {
	ip := net.ParseIP(h)
	if ip == nil {
		return nil, errors.New("not an address")
	}
	return ip, nil
}

// curlFailure is how curl reports a failed transfer, with its exit code.
func curlFailure(r request, err error) (int, string) {
	var ue *urlError
	if errors.As(err, &ue) {
		return ue.code, ue.msg
	}
	u, _ := url.Parse(r.url)
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(msg, "connection refused"):
		return 7, fmt.Sprintf("Failed to connect to %s port %s after 0 ms: Couldn't connect to server", host, port)
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "timed out") || strings.Contains(msg, "i/o timeout"):
		return 28, fmt.Sprintf("Failed to connect to %s port %s after %d ms: Timeout was reached (%s)", host, port, r.timeout.Milliseconds(), reason(msg))
	case errors.Is(err, io.EOF) || strings.Contains(msg, "EOF"):
		return 52, "Empty reply from server"
	case errors.Is(err, syscall.ECONNRESET) || strings.Contains(msg, "connection reset"):
		return 56, "Recv failure: Connection reset by peer"
	case strings.Contains(msg, "certificate"):
		return 60, "SSL certificate problem: " + reason(msg)
	}
	return 7, fmt.Sprintf("Failed to connect to %s port %s: %s", host, port, reason(msg))
}

// reason is an error's last part, without Go's "Get URL:" prefixes.
func reason(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		if j := strings.Index(msg, "("); j >= 0 {
			return strings.TrimSuffix(msg[j+1:], ")")
		}
		return msg[i+2:]
	}
	return msg
}

// curl runs curl's common options: -s -S -i -I -v -f -k -L -H -X -m
// --connect-timeout -o.
func curl(m *Machine, args []string, out, errw io.Writer) int {
	r := request{method: http.MethodGet, headers: http.Header{}, timeout: 0}
	var silent, showErr, include, verbose, fail, discard bool
	usage := func(msg string) int {
		fmt.Fprintf(errw, "curl: %s\ncurl: try 'curl --help' for more information\n", msg)
		return 2
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		switch {
		case a == "--silent":
			silent = true
		case a == "--show-error":
			showErr = true
		case a == "--include":
			include = true
		case a == "--head":
			r.method, include = http.MethodHead, true
		case a == "--verbose":
			verbose = true
		case a == "--fail":
			fail = true
		case a == "--insecure":
			r.insecure = true
		case a == "--location":
			r.follow = true
		case a == "-H" || a == "--header":
			v, ok := val()
			k, hv, found := strings.Cut(v, ":")
			if !ok || !found {
				return usage("option " + a + ": requires a header 'Name: value'")
			}
			r.headers.Add(strings.TrimSpace(k), strings.TrimSpace(hv))
		case a == "-X" || a == "--request":
			v, ok := val()
			if !ok {
				return usage("option " + a + ": requires parameter")
			}
			r.method = strings.ToUpper(v)
		case a == "-m" || a == "--max-time" || a == "--connect-timeout":
			v, ok := val()
			secs, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil || secs < 0 {
				return usage("option " + a + ": expected a proper numerical parameter")
			}
			r.timeout = time.Duration(secs * float64(time.Second))
		case a == "-o" || a == "--output":
			v, ok := val()
			if !ok {
				return usage("option " + a + ": requires parameter")
			}
			if v != "/dev/null" && !strings.EqualFold(v, "NUL") {
				fmt.Fprintf(errw, "curl: (23) Failure writing output to destination: the emulated machine's disk takes no downloads (%s)\n", v)
				return 23
			}
			discard = true
		case strings.HasPrefix(a, "--"):
			return m.refuse("curl "+a, errw)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, f := range a[1:] {
				switch f {
				case 's':
					silent = true
				case 'S':
					showErr = true
				case 'i':
					include = true
				case 'I':
					r.method, include = http.MethodHead, true
				case 'v':
					verbose = true
				case 'f':
					fail = true
				case 'k':
					r.insecure = true
				case 'L':
					r.follow = true
				default:
					return m.refuse("curl -"+string(f), errw)
				}
			}
		default:
			if r.url != "" {
				return usage("only one URL at a time on this machine")
			}
			r.url = a
		}
	}
	if r.url == "" {
		return usage("no URL specified!")
	}
	if !strings.Contains(r.url, "://") {
		r.url = "http://" + r.url
	}
	if verbose {
		fmt.Fprintf(errw, "* Trying %s...\n", hostOf(r.url))
	}
	resp, body, err := m.fetch(r)
	if err != nil {
		code, msg := curlFailure(r, err)
		if !silent || showErr {
			fmt.Fprintf(errw, "curl: (%d) %s\n", code, msg)
		}
		return code
	}
	if verbose {
		fmt.Fprintf(errw, "* Connected to %s\n> %s %s HTTP/1.1\n>\n", hostOf(r.url), r.method, resp.Request.URL.RequestURI())
		fmt.Fprintf(errw, "< %s %s\n", resp.Proto, resp.Status)
		for _, line := range headerLines(resp) {
			fmt.Fprintf(errw, "< %s\n", line)
		}
		fmt.Fprintln(errw, "<")
	}
	if fail && resp.StatusCode >= 400 {
		if !silent || showErr {
			fmt.Fprintf(errw, "curl: (22) The requested URL returned error: %d\n", resp.StatusCode)
		}
		return 22
	}
	if discard {
		return 0
	}
	if include {
		fmt.Fprintf(out, "%s %s\r\n", resp.Proto, resp.Status)
		for _, line := range headerLines(resp) {
			fmt.Fprintf(out, "%s\r\n", line)
		}
		fmt.Fprint(out, "\r\n")
	}
	_, _ = out.Write(body)
	return 0
}

func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}

func headerLines(resp *http.Response) []string {
	var out []string
	for k, vs := range resp.Header {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	if resp.ContentLength >= 0 && resp.Header.Get("Content-Length") == "" {
		out = append(out, "Content-Length: "+strconv.FormatInt(resp.ContentLength, 10))
	}
	sort.Strings(out)
	return out
}

// invokeWebRequest is Windows PowerShell's Invoke-WebRequest (-Uri,
// -Method, -TimeoutSec, -UseBasicParsing), printing the response object as
// PowerShell formats it.
func invokeWebRequest(m *Machine, args []string, out, errw io.Writer) int {
	r := request{method: http.MethodGet, headers: http.Header{}, follow: true}
	for i := 0; i < len(args); i++ {
		a := strings.ToLower(args[i])
		val := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "-uri":
			r.url = val()
		case a == "-method":
			r.method = strings.ToUpper(val())
		case a == "-timeoutsec":
			secs, err := strconv.Atoi(val())
			if err != nil || secs < 0 {
				fmt.Fprintln(errw, "Invoke-WebRequest : Cannot bind parameter 'TimeoutSec'.")
				return exitFailed
			}
			r.timeout = time.Duration(secs) * time.Second
		case a == "-usebasicparsing" || a == "-disablekeepalive" || a == "-verbose":
		case a == "-maximumredirection":
			if val() == "0" {
				r.follow = false
			}
		case strings.HasPrefix(a, "-"):
			return m.refuse("Invoke-WebRequest "+args[i], errw)
		default:
			if r.url != "" {
				fmt.Fprintf(errw, "Invoke-WebRequest : A positional parameter cannot be found that accepts argument '%s'.\n", args[i])
				return exitFailed
			}
			r.url = args[i]
		}
	}
	if r.url == "" {
		fmt.Fprintln(errw, "Invoke-WebRequest : Cannot validate argument on parameter 'Uri'. The argument is null or empty.")
		return exitFailed
	}
	if !strings.Contains(r.url, "://") {
		r.url = "http://" + r.url
	}
	resp, body, err := m.fetch(r)
	if err != nil {
		var ue *urlError
		switch {
		case errors.As(err, &ue) && ue.code == 6:
			fmt.Fprintln(errw, "Invoke-WebRequest : The remote name could not be resolved: '"+hostOf(r.url)+"'")
		case strings.Contains(err.Error(), "timed out") || strings.Contains(err.Error(), "timeout") || errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintln(errw, "Invoke-WebRequest : The operation has timed out.")
		case strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset"):
			fmt.Fprintln(errw, "Invoke-WebRequest : The underlying connection was closed: An unexpected error occurred on a receive.")
		default:
			fmt.Fprintln(errw, "Invoke-WebRequest : Unable to connect to the remote server")
		}
		return exitFailed
	}
	if resp.StatusCode >= 400 {
		fmt.Fprintf(errw, "Invoke-WebRequest : The remote server returned an error: (%d) %s.\n", resp.StatusCode, http.StatusText(resp.StatusCode))
		return exitFailed
	}
	indent := func(s string) string {
		return strings.ReplaceAll(strings.TrimRight(s, "\r\n"), "\n", "\n"+strings.Repeat(" ", 20))
	}
	var raw strings.Builder
	fmt.Fprintf(&raw, "%s %s\n", resp.Proto, resp.Status)
	var hdrs []string
	for _, line := range headerLines(resp) {
		fmt.Fprintln(&raw, line)
		k, v, _ := strings.Cut(line, ": ")
		hdrs = append(hdrs, "["+k+", "+v+"]")
	}
	fmt.Fprintf(&raw, "\n%s", body)
	fmt.Fprintf(out, "\n%-18s: %d\n%-18s: %s\n%-18s: %s\n%-18s: %s\n%-18s: {%s}\n%-18s: %d\n\n",
		"StatusCode", resp.StatusCode,
		"StatusDescription", http.StatusText(resp.StatusCode),
		"Content", indent(string(body)),
		"RawContent", indent(raw.String()),
		"Headers", strings.Join(hdrs, ", "),
		"RawContentLength", len(body))
	return 0
}
