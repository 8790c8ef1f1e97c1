package machines_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/poll"
)

// TestAFailedBootAnswersRunCommandAndBootDiagnostics: a Windows machine
// whose boot failed never joined, yet its VM agent runs a script that
// reads cloudbase-init's log from its disk, its simulated shell refuses
// what it cannot answer, and its serial console (boot diagnostics) holds
// the same log.
func TestAFailedBootAnswersRunCommandAndBootDiagnostics(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "runcmd-rg")
	vms, err := endpoint.NewClient(armCfg, subscriptID, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	const name = "win-broken"
	a.vm(t, ctx, virtualmachines.Spec{Name: name, ComputerName: name, Windows: true, CustomData: []byte("#!/bin/bash\necho not cloudbase-init data\n"),
		Image: resolveImage(t, images.Request{OS: infrav1.Windows})}, a.nodeSubnet)
	poll.Until(t, 60*time.Second, func() string {
		iv, err := vms.InstanceView(ctx, a.rg, name, nil)
		if err != nil {
			return err.Error()
		}
		for _, s := range iv.Statuses {
			if s.Code != nil && *s.Code == "BootStatus/failed" {
				return ""
			}
		}
		return "the boot has not failed yet"
	})

	poller, err := vms.BeginRunCommand(ctx, a.rg, name, armcompute.RunCommandInput{CommandID: to.Ptr("RunPowerShellScript"), Script: []*string{
		to.Ptr(`Get-Content 'C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\cloudbase-init.log' -Tail 50`),
		to.Ptr(`Get-Service kubelet`),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Value) != 2 || res.Value[0].Message == nil || res.Value[1].Message == nil {
		t.Fatalf("run command result: %+v", res.Value)
	}
	stdout, stderr := *res.Value[0].Message, *res.Value[1].Message
	if !strings.Contains(stdout, "cloudbase-init") || !strings.Contains(stdout, "boot failed") {
		t.Errorf("the script's output is not cloudbase-init's log with the failure:\n%s", stdout)
	}
	if !strings.Contains(stderr, `cannot run "Get-Service"`) {
		t.Errorf("an unknown command was not refused on the error stream: %q", stderr)
	}

	bd, err := vms.RetrieveBootDiagnosticsData(ctx, a.rg, name, &armcompute.VirtualMachinesClientRetrieveBootDiagnosticsDataOptions{SasURIExpirationTimeInMinutes: to.Ptr[int32](5)})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(emu.CACertPEM())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get(*bd.SerialConsoleLogBlobURI)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(serial), "boot failed") {
		t.Errorf("the serial console: %d %q", resp.StatusCode, serial)
	}
	a.deleteVM(t, ctx, name)
}
