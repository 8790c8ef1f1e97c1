package arm_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
)

func (w *world) blobClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// fetch GETs a URL with no Authorization header, as a browser or curl
// fetches a SAS URL.
func (w *world) fetch(u string) (int, string) {
	w.t.Helper()
	resp, err := w.blobClient().Get(u)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func withBootDiagnostics(vm armcompute.VirtualMachine) armcompute.VirtualMachine {
	vm.Properties.DiagnosticsProfile = &armcompute.DiagnosticsProfile{BootDiagnostics: &armcompute.BootDiagnostics{Enabled: to.Ptr(true)}}
	return vm
}

// retrieveBootDiagnosticsData hands out URLs on the emulator's listener
// that anyone holding them may read until they expire, and nothing else.
func TestBootDiagnosticsServeTheSerialLogUntilTheSASExpires(t *testing.T) {
	w := newWorld(t, nil)
	w.rt.Serial = func(id string) []byte { return []byte("serial console of " + id[strings.LastIndex(id, "/")+1:] + "\n") }
	w.group("bd")
	subnet := w.network("bd")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "bd", "on", withBootDiagnostics(linuxVM(*w.nic("bd", "on-nic", subnet).ID, "")), nil))
	done(vms.BeginCreateOrUpdate(w.ctx, "bd", "off", linuxVM(*w.nic("bd", "off-nic", subnet).ID, ""), nil))

	iv := must(vms.InstanceView(w.ctx, "bd", "on", nil))
	if iv.BootDiagnostics == nil || iv.BootDiagnostics.SerialConsoleLogBlobURI != nil || iv.BootDiagnostics.ConsoleScreenshotBlobURI != nil {
		t.Errorf("managed boot diagnostics in the instance view: %+v", iv.BootDiagnostics)
	}
	if iv := must(vms.InstanceView(w.ctx, "bd", "off", nil)); iv.BootDiagnostics != nil {
		t.Errorf("a VM without boot diagnostics shows %+v", iv.BootDiagnostics)
	}
	_, err := vms.RetrieveBootDiagnosticsData(w.ctx, "bd", "off", nil)
	if re := azureCode(t, err, "OperationNotAllowed"); re.StatusCode != http.StatusConflict {
		t.Errorf("a VM without boot diagnostics: %v", err)
	}
	_, err = vms.RetrieveBootDiagnosticsData(w.ctx, "bd", "on", &armcompute.VirtualMachinesClientRetrieveBootDiagnosticsDataOptions{SasURIExpirationTimeInMinutes: to.Ptr[int32](1441)})
	azureCode(t, err, "InvalidParameter")

	got := must(vms.RetrieveBootDiagnosticsData(w.ctx, "bd", "on", &armcompute.VirtualMachinesClientRetrieveBootDiagnosticsDataOptions{SasURIExpirationTimeInMinutes: to.Ptr[int32](10)}))
	serial := *got.SerialConsoleLogBlobURI
	if !strings.HasPrefix(serial, w.srv.URL()+"/") {
		t.Errorf("the serial log's URL %s is not on the emulator's listener %s", serial, w.srv.URL())
	}
	if status, body := w.fetch(serial); status != http.StatusOK || body != "serial console of on\n" {
		t.Errorf("the serial log: %d %q", status, body)
	}
	if status, body := w.fetch(*got.ConsoleScreenshotBlobURI); status != http.StatusNotFound || !strings.Contains(body, "BlobNotFound") {
		t.Errorf("the screenshot of a machine with no screen: %d %q", status, body)
	}

	// Another expiry under the same signature, and a guessed path.
	u := must(url.Parse(serial))
	q := u.Query()
	q.Set("se", time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339))
	u.RawQuery = q.Encode()
	if status, body := w.fetch(u.String()); status != http.StatusForbidden || !strings.Contains(body, "AuthenticationFailed") {
		t.Errorf("a changed expiry: %d %q", status, body)
	}
	if status, _ := w.fetch(strings.Replace(serial, "/on.serialconsole.log", "/off.serialconsole.log", 1)); status != http.StatusForbidden {
		t.Errorf("another blob under this signature: %d", status)
	}

	w.srv.SetClock(func() time.Time { return time.Now().Add(11 * time.Minute) })
	if status, body := w.fetch(serial); status != http.StatusForbidden || !strings.Contains(body, "Signature not valid in the specified time frame") {
		t.Errorf("an expired SAS: %d %q", status, body)
	}
}

// The scale-set instance form, with boot diagnostics from the scale set's
// model.
func TestBootDiagnosticsOfAScaleSetInstance(t *testing.T) {
	w := newWorld(t, nil)
	w.rt.Serial = func(id string) []byte { return []byte("serial of " + id) }
	w.group("bd")
	ss := scaleSet(w.network("bd"), "win", "", 1)
	ss.Properties.VirtualMachineProfile.DiagnosticsProfile = &armcompute.DiagnosticsProfile{BootDiagnostics: &armcompute.BootDiagnostics{Enabled: to.Ptr(true)}}
	done(must(w.compute.NewVirtualMachineScaleSetsClient(), nil).BeginCreateOrUpdate(w.ctx, "bd", "pool", ss, nil))
	insts := must(w.compute.NewVirtualMachineScaleSetVMsClient(), nil)
	got := must(insts.RetrieveBootDiagnosticsData(w.ctx, "bd", "pool", "0", nil))
	if status, body := w.fetch(*got.SerialConsoleLogBlobURI); status != http.StatusOK || !strings.HasSuffix(body, "/virtualMachineScaleSets/pool/virtualMachines/0") {
		t.Errorf("the instance's serial log: %d %q", status, body)
	}
	if iv := must(insts.GetInstanceView(w.ctx, "bd", "pool", "0", nil)); iv.BootDiagnostics == nil {
		t.Errorf("the instance view has no bootDiagnostics")
	}
}
