// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3
// module so that it comes from the Go module proxy like everything else; the
// etcd repository's own main package lives in a module that cannot be required.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
