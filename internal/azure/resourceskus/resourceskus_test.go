package resourceskus_test

import (
	"context"
	"slices"
	"testing"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/resourceskus"
)

// The zones of a location are those where some size is not restricted; a
// size's own zones and capabilities are what the API says of it.
func TestZonesAndSizesLessTheSubscriptionsRestrictions(t *testing.T) {
	srv, cfg := azuretest.StartServer(t, "rg")
	var everySizeOutOfZone3 []arm.SKURestriction
	for _, size := range []string{"Standard_B1s", "Standard_B2s", "Standard_B2ms", "Standard_D2s_v3", "Standard_D4s_v3", "Standard_D8s_v3", "Standard_D2_v3", "Standard_D4_v3",
		"Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5", "Standard_DS2_v2", "Standard_F2s_v2", "Standard_E4s_v3", "Standard_A2_v2", "Standard_D1_v2"} {
		everySizeOutOfZone3 = append(everySizeOutOfZone3, arm.SKURestriction{Size: size, Location: azuretest.Location, Zones: []string{"3"}})
	}
	srv.SetFaults(arm.FaultConfig{SKURestrictions: append(everySizeOutOfZone3, arm.SKURestriction{Size: "Standard_E4s_v3", Location: azuretest.Location, Reason: "QuotaId"})})
	s, err := resourceskus.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	zones, err := s.Zones(ctx, azuretest.Location)
	if err != nil || !slices.Equal(zones, []string{"1", "2"}) {
		t.Fatalf("zones %v (%v), want 1 and 2: every size is restricted in zone 3", zones, err)
	}
	if zones, _ := s.Zones(ctx, "westcentralus"); len(zones) != 0 {
		t.Errorf("westcentralus zones %v, want none", zones)
	}
	d2, ok, err := s.VMSize(ctx, "West Europe", "Standard_D2s_v3")
	if err != nil || !ok || d2.InZone("3") || !d2.InZone("1") || !d2.InZone("") || !d2.Boots("V2") || !d2.AcceleratedNetworking || !d2.PremiumIO {
		t.Errorf("Standard_D2s_v3: %+v %v %v", d2, ok, err)
	}
	e4, _, _ := s.VMSize(ctx, azuretest.Location, "Standard_E4s_v3")
	if !e4.Restricted || e4.Reason != "QuotaId" || e4.InZone("") {
		t.Errorf("Standard_E4s_v3, restricted in the whole location: %+v", e4)
	}
	a2, _, _ := s.VMSize(ctx, azuretest.Location, "Standard_A2_v2")
	if a2.Boots("V2") || !a2.Boots("V1") || a2.AcceleratedNetworking || a2.PremiumIO {
		t.Errorf("Standard_A2_v2: %+v", a2)
	}
	if _, ok, _ := s.VMSize(ctx, azuretest.Location, "Standard_Z99"); ok {
		t.Error("an unknown size is offered")
	}
	if most, err := s.MaxFaultDomains(ctx, "westcentralus"); err != nil || most != 2 {
		t.Errorf("westcentralus fault domains %d (%v), want 2", most, err)
	}
}
