package upstreame2e

import (
	"regexp"
	"strings"
	"testing"
)

// A report in the layout Ginkgo v2.28.1 writes (reporters/junit_report.go):
// a suite-level node, a passed spec, a failure with a multi-line message, a
// spec the skip expression filtered and one that skipped itself.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="0" errors="0" failures="1" time="61.2">
  <testsuite name="Kubernetes e2e suite" package="/bin" tests="5" disabled="0" skipped="2" errors="0" failures="1" time="61.2" timestamp="2026-11-28T14:00:00">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="3.1"></testcase>
    <testcase name="[It] [sig-windows] [Feature:Windows] DNS should support configurable pod DNS servers" classname="Kubernetes e2e suite" status="passed" time="20.5"></testcase>
    <testcase name="[It] [sig-windows] [Feature:WindowsHostProcessContainers] HostProcess containers should support init containers" classname="Kubernetes e2e suite" status="failed" time="300.2">
      <failure message="&#xA;  Timed out after 300.001s.&#xA;  pod never ran" type="failed">[FAILED] Timed out after 300.001s.</failure>
    </testcase>
    <testcase name="[It] [sig-windows] [Feature:Windows] GMSA Full [Serial] [Slow] GMSA support works end to end" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-windows] [Feature:Windows] [Excluded:WindowsDocker] RebootHost containers [Serial] [Disruptive] [Slow] should run as a reboot process on the host/node" classname="Kubernetes e2e suite" status="skipped" time="0.4"><skipped message="skipped - skipping test until graceful shutdown feature enabled"></skipped></testcase>
  </testsuite>
</testsuites>`

func TestReadJUnitGivesEachSpecAndItsFirstLine(t *testing.T) {
	rs, err := ReadJUnit(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 {
		t.Fatalf("%d results, want 5: %+v", len(rs), rs)
	}
	if f := rs[2]; !f.Failed() || f.Why != "Timed out after 300.001s." {
		t.Errorf("failure read as %+v, want failed with its first non-empty line", f)
	}
	if s := rs[4]; s.Failed() || s.Why != "skipped - skipping test until graceful shutdown feature enabled" {
		t.Errorf("self-skip read as %+v", s)
	}
	sum := Summary(rs)
	if !strings.HasPrefix(sum, "upstream [sig-windows] e2e: 2 passed, 1 failed, 2 skipped\n") {
		t.Errorf("summary counts:\n%s", sum)
	}
	if !strings.HasPrefix(strings.SplitN(sum, "\n", 3)[1], "FAIL ") {
		t.Errorf("failures must come first:\n%s", sum)
	}
	if !strings.Contains(sum, "not modelled locally: needs an Active Directory domain") {
		t.Errorf("a filtered spec must say why it did not run:\n%s", sum)
	}
}

func TestReadJUnitRefusesWhatIsNoReport(t *testing.T) {
	if _, err := ReadJUnit(strings.NewReader("Ginkgo ran no specs")); err == nil {
		t.Fatal("no error for text that is no JUnit report")
	}
}

// Spec texts of test/e2e/windows at k8s.io/kubernetes v1.36.3, as
// `e2e.test --ginkgo.dry-run` lists them: the skip expression must take the
// ones the local world does not model and leave the rest to run.
var (
	outOfScope = []string{
		"[sig-windows] [Feature:Windows] GMSA Full [Serial] [Slow] GMSA support can read and write file to remote SMB folder",
		"[sig-windows] [Feature:Windows] GMSA Kubelet [Slow] kubelet GMSA support when creating a pod with correct GMSA credential specs passes the credential specs down to the Pod's containers",
		"[sig-windows] [Feature:WindowsHyperVContainers] HyperV containers should start a hyperv isolated container",
		"[sig-windows] [Feature:Windows] Kubelet-Stats Kubelet stats collection for Windows nodes when windows is booted should return bootid within 10 seconds",
		"[sig-windows] [Feature:Windows] Memory Limits [Serial] [Slow] Allocatable node memory should be equal to a calculated allocatable memory value",
		"[sig-windows] [Feature:WindowsHostProcessContainers] HostProcess containers container stats validation",
		"[sig-windows] Hybrid cluster network for all supported CNIs should provide Internet connection and DNS for Windows containers [Feature:Networking-IPv4] [Feature:Networking-DNS]",
	}
	inScope = []string{
		"[sig-windows] [Feature:WindowsHostProcessContainers] HostProcess containers should run as a process on the host/node",
		"[sig-windows] [Feature:WindowsHostProcessContainers] HostProcess containers should support querying api-server using in-cluster config",
		"[sig-windows] Hybrid cluster network for all supported CNIs should have stable networking for Linux and Windows pods",
		"[sig-windows] Services should be able to create a functioning NodePort service for Windows",
		"[sig-windows] [Feature:Windows] SecurityContext should ignore Linux Specific SecurityContext if set",
		"[sig-windows] [Feature:Windows] Windows volume mounts check volume mount permissions container should have readOnly permissions on emptyDir",
		"[sig-windows] [Feature:Windows] DNS should support configurable pod DNS servers",
	}
)

func TestSkipsTakeOnlyWhatIsNotModelled(t *testing.T) {
	skip := regexp.MustCompile(SkipRegexp())
	for _, s := range outOfScope {
		if !skip.MatchString(s) {
			t.Errorf("runs, but the local world does not model it: %s", s)
		}
		if sk, ok := SkipFor(s); !ok || sk.Reason == "" || !strings.HasPrefix(sk.Source, "test/e2e/windows/") {
			t.Errorf("no reason and source for %s: %+v", s, sk)
		}
	}
	for _, s := range inScope {
		if skip.MatchString(s) {
			t.Errorf("skipped, but the local world models it: %s", s)
		}
	}
	if !regexp.MustCompile(Focus).MatchString(inScope[0]) {
		t.Errorf("focus %s does not select %s", Focus, inScope[0])
	}
}
