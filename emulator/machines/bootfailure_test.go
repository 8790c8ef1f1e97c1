package machines_test

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	infrav1 "github.com/winkube/winkube/api/v1alpha1"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
)

// TestBrokenCustomDataFailsTheBootVisibly: custom data that is no
// Cluster API bootstrap data shows in the VM's instance view, with why.
func TestBrokenCustomDataFailsTheBootVisibly(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "broken-rg")
	cases := map[string]string{
		"broken-script":  "#!/bin/bash\necho not cloud-init\n",
		"broken-nojoin":  "#cloud-config\nruncmd:\n- echo hello\n",
		"broken-jinja":   "## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.instance_id }}\n",
		"broken-nofiles": "#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n",
	}
	want := map[string]string{
		"broken-script": "not a cloud-config", "broken-nojoin": "runs no kubeadm init or kubeadm join",
		"broken-jinja": "template expressions", "broken-nofiles": "writes no /run/kubeadm/kubeadm-join-config.yaml",
	}
	vms, err := endpoint.NewClient(armCfg, subscriptID, armcompute.NewVirtualMachinesClient)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range cases {
		a.vm(t, ctx, virtualmachines.Spec{Name: name, ComputerName: name, CustomData: []byte(data), Image: resolveImage(t, images.Request{OS: infrav1.Linux})}, a.nodeSubnet)
		if msg := bootFailure(t, ctx, vms, a.rg, name); !strings.Contains(msg, want[name]) {
			t.Errorf("%s: boot failed with %q, want %q", name, msg, want[name])
		}
		a.deleteVM(t, ctx, name)
	}
}
