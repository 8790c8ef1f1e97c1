package machines

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/publicips"
)

// ARMPublicIPs gives LoadBalancer Services addresses as Azure's cloud
// provider does: a Standard static public IP per Service, in the resource
// group of the cluster's control-plane machine, created through ARM (here
// the emulator, whose public addresses are loopback ones).
func ARMPublicIPs(cfg endpoint.Config) func(arm.Machine) cloud.PublicIPs {
	return func(m arm.Machine) cloud.PublicIPs {
		return &armIPs{cfg: cfg, machine: m}
	}
}

type armIPs struct {
	cfg     endpoint.Config
	machine arm.Machine
}

func subscriptionOf(id string) string {
	parts := strings.Split(strings.Trim(id, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if strings.EqualFold(parts[i], "subscriptions") {
			return parts[i+1]
		}
	}
	return ""
}

func (a *armIPs) svc() (*publicips.Service, error) {
	sub := subscriptionOf(a.machine.ID)
	if sub == "" {
		return nil, fmt.Errorf("machine ID %q names no subscription", a.machine.ID)
	}
	return publicips.New(sub, a.cfg)
}

func (a *armIPs) Allocate(ctx context.Context, name string) (string, error) {
	s, err := a.svc()
	if err != nil {
		return "", err
	}
	spec := publicips.Spec{ResourceGroup: a.machine.ResourceGroup, Name: name, Location: a.machine.Location,
		Tags: map[string]*string{"k8s-azure-service": to.Ptr(name)}}
	token := ""
	for done := false; !done; {
		if token, done, err = s.Reconcile(ctx, spec, token); err != nil {
			return "", err
		}
		wait(ctx, done)
	}
	ip, err := s.Get(ctx, a.machine.ResourceGroup, name)
	if err != nil {
		return "", err
	}
	if ip == nil || ip.Properties == nil || ip.Properties.IPAddress == nil {
		return "", fmt.Errorf("public IP %s has no address", name)
	}
	return *ip.Properties.IPAddress, nil
}

func (a *armIPs) Release(ctx context.Context, name string) error {
	s, err := a.svc()
	if err != nil {
		return err
	}
	token := ""
	for done := false; !done; {
		if token, done, err = s.Delete(ctx, a.machine.ResourceGroup, name, token); err != nil {
			return err
		}
		wait(ctx, done)
	}
	return nil
}

// wait paces polling of an operation that is not done yet.
func wait(ctx context.Context, done bool) {
	if done {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}
