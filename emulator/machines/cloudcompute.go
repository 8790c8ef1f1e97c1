package machines

import (
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
)

// ARMCompute is Azure's compute RP (disks, virtual machines) for the
// components of a workload cluster that read a cloud config, such as the
// Azure Disk CSI driver's controller: armcompute clients, authenticated
// with the credential the cloud config names as ARMNetwork's are (and the
// same static token when connect gives one), one factory per credential
// and subscription, as cloud-provider-azure's client factory keeps one per
// subscription (pkg/azclient, GetDiskClientForSub). connect is called on
// the first use: the emulator's endpoint is known only once it runs.
func ARMCompute(connect ARMConnection) func(cloudprovider.Credentials, string) (*armcompute.ClientFactory, error) {
	var mu sync.Mutex
	factories := map[string]*armcompute.ClientFactory{}
	return func(cr cloudprovider.Credentials, sub string) (*armcompute.ClientFactory, error) {
		mu.Lock()
		defer mu.Unlock()
		k := cr.Key() + "\x00" + sub
		if f := factories[k]; f != nil {
			return f, nil
		}
		cred, opts, err := connect.as(cr)
		if err != nil {
			return nil, err
		}
		f, err := armcompute.NewClientFactory(sub, cred, opts)
		if err != nil {
			return nil, err
		}
		factories[k] = f
		return f, nil
	}
}
