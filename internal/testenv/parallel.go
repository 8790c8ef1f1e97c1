package testenv

import (
	"flag"
	"strconv"
)

// WaitingTests raises go test's -parallel, when the command line does
// not set it, to n for a package whose parallel tests spend their time
// waiting (on timers and backoffs that mirror Azure or the kubelet, or on
// a shared API server) rather than computing. go test's default is
// GOMAXPROCS, two on a 2-core machine, which leaves such a package's
// waits mostly one after another and a core idle. Call it from TestMain
// before m.Run.
func WaitingTests(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	raiseParallel(flag.CommandLine, n)
}

// raiseParallel sets fs's test.parallel to n unless it was set on the
// command line or is already at least n.
func raiseParallel(fs *flag.FlagSet, n int) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	p := fs.Lookup("test.parallel")
	if set || p == nil {
		return
	}
	if cur, err := strconv.Atoi(p.Value.String()); err == nil && cur >= n {
		return
	}
	_ = p.Value.Set(strconv.Itoa(n))
}
