package kubelet

import (
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
)

// agnhost is the e2e tests' multi-purpose image: its program's first
// argument names a subcommand. The HTTP servers of the subcommands the
// Windows e2e tests run are served here, from agnhost's source at 2.63.0
// (kubernetes/kubernetes test/images/agnhost, tag v1.36.3, module
// k8s.io/kubernetes@v1.36.3):
//   - netexec (netexec/netexec.go): --http-port, 8080 by default;
//     /hostname answers the container's host name, /clientip the
//     request's remote address, /echo?msg=M[&code=C] M with status C;
//   - serve-hostname (serve-hostname/serve_hostname.go): --port, 9376
//     by default, answers the host name on every path.
//
// Any other subcommand (pause among them) serves nothing.

// agnhostServes is the port and handler of the agnhost subcommand the
// container runs, if it runs one that serves HTTP.
func agnhostServes(c corev1.Container, img *Pulled, hostname string) (int32, http.Handler, bool) {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(c.Command) == 0 && img != nil && img.Process != nil {
		argv = append([]string(nil), img.Process.Entrypoint...)
		if len(c.Args) > 0 {
			argv = append(argv, c.Args...)
		} else {
			argv = append(argv, img.Process.Cmd...)
		}
	}
	if len(argv) < 2 {
		return 0, nil, false
	}
	prog := strings.ToLower(path.Base(strings.ReplaceAll(argv[0], `\`, "/")))
	if prog != "agnhost" && prog != "agnhost.exe" && prog != "agnhost-2" {
		return 0, nil, false
	}
	flag := func(name string, def int32) int32 {
		if v, ok := containerruntime.Arg(corev1.Container{Args: argv[2:]}, name); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return int32(n)
			}
		}
		return def
	}
	mux := http.NewServeMux()
	switch argv[1] {
	case "netexec":
		mux.HandleFunc("/hostname", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, hostname) })
		mux.HandleFunc("/clientip", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.RemoteAddr) })
		mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
			if cs := r.FormValue("code"); cs != "" {
				code, err := strconv.Atoi(cs)
				if err != nil {
					fmt.Fprintf(w, "argument 'code' must be an integer or empty, got %q\n", cs)
					return
				}
				w.WriteHeader(code)
			}
			fmt.Fprint(w, r.FormValue("msg"))
		})
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {})
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "NOW: simulated") })
		return flag("--http-port", 8080), simulated(mux), true
	case "serve-hostname":
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, hostname) })
		return flag("--port", 9376), simulated(mux), true
	}
	return 0, nil, false
}

// simulated marks the answers as a simulation's, as every simulated
// container's are.
func simulated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(SimulatedHeader, "true")
		h.ServeHTTP(w, r)
	})
}
