package hostproc

import (
	"os"
	"strconv"
)

// GCPercent is the Go collector's target (GOGC) for the Go programs a local
// world runs on one host: winkube, the management plane's etcd and
// kube-apiserver, and the control-plane binaries of its machines. A bring-up
// is CPU-bound, and with Go's default of 100 (a collection each time the
// heap doubles what is live) the collector's mark workers and assists took
// 15 % of winkube's CPU at 1+100+400. At 200 a heap grows to three times
// what is live before a collection, and they took 9 % (and 10 % of the
// management API server's, profiled at 1+20+80). Measured with winkube
// bench, three runs of each: at 1+20+80 the bring-up's CPU-seconds went from
// a median of 178 to 151 and its time from 104 to 92 s; at 1+100+400 (one
// run of each) from 1,067 to 752 CPU-seconds and from 543 to 396 s, the API
// servers holding about a third more memory. The collector's pace changes
// nothing the programs do: every request, watch, lease and status write is
// as before. Kubernetes' binaries honour GOGC as any Go program does; a GOGC
// set for winkube (even empty) is kept, and passed on as it is.
const GCPercent = 200

// Env is the environment a host process starts with: winkube's own, with
// GOGC=GCPercent added unless the user set GOGC.
func Env() []string {
	env := os.Environ()
	if _, ok := os.LookupEnv("GOGC"); ok {
		return env
	}
	return append(env, "GOGC="+strconv.Itoa(GCPercent))
}
