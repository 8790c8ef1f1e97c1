// Command clientversions lists the REST operations an Azure SDK for Go
// resource manager module calls (method, path template, api-version), in
// the format of emulator/arm/testdata/clients/, so that the emulator's
// test can send the api-versions of a module release that go.mod does not
// hold:
//
//	go mod download -json github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8@v8.4.0
//	go run ./emulator/arm/internal/sdkops/clientversions <its Dir> armcompute/v8@v8.4.0
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/winkube/winkube/emulator/arm/internal/sdkops"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: clientversions <module directory> <module@version>")
		os.Exit(2)
	}
	ops, err := sdkops.Load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lines := map[string]bool{}
	for _, op := range ops {
		lines[op.Method+" "+op.Path+" "+op.APIVersion] = true
	}
	out := make([]string, 0, len(lines))
	for l := range lines {
		out = append(out, l)
	}
	sort.Strings(out)
	fmt.Printf("# %s: the *_client.go files of the Go module\n", os.Args[2])
	for _, l := range out {
		fmt.Println(l)
	}
}
