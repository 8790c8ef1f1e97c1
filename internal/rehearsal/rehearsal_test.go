package rehearsal_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/winkube/winkube/internal/rehearsal"
)

// TestBreakChangesOnlyInputs: every class changes the spec, and the
// timeouts a rehearsal asks for become kubeadm's.
func TestBreakChangesOnlyInputs(t *testing.T) {
	for _, c := range rehearsal.Classes {
		spec := bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "c:/k/azure.json", Content: "{}"}}}
		before := spec.DeepCopy()
		if err := rehearsal.Break(&spec, c, rehearsal.Options{Windows: true, Token: "abcdef.0123456789abcdef", Discovery: 3 * time.Second}); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if spec.JoinConfiguration.Timeouts.DiscoverySeconds == nil || *spec.JoinConfiguration.Timeouts.DiscoverySeconds != 3 {
			t.Errorf("%s: discovery timeout %v", c, spec.JoinConfiguration.Timeouts.DiscoverySeconds)
		}
		before.JoinConfiguration.Timeouts = spec.JoinConfiguration.Timeouts
		if equality.Semantic.DeepEqual(*before, spec) {
			t.Errorf("%s left the spec as it was", c)
		}
	}
	if err := rehearsal.Break(&bootstrapv1.KubeadmConfigSpec{}, rehearsal.ExpiredToken, rehearsal.Options{}); err == nil {
		t.Error("an expired-token rehearsal without a token was accepted")
	}
	if err := rehearsal.Break(&bootstrapv1.KubeadmConfigSpec{}, rehearsal.MissingAzureJSON, rehearsal.Options{}); err == nil {
		t.Error("dropping an azure.json that is not there was accepted")
	}
}
