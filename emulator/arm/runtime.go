package arm

import (
	"context"
	"net/netip"
	"sync"
)

// Machine is what the emulator knows of a VM or scale-set instance that has
// finished provisioning: enough for a machine runtime to boot it as Azure's
// cloud-init or cloudbase-init would.
type Machine struct {
	// ID is the ARM ID of the VM or scale-set instance.
	ID            string
	Name          string
	ComputerName  string
	ResourceGroup string
	Location      string
	Zone          string
	// OS is "Linux" or "Windows".
	OS     string
	VMSize string
	// VCPUs and MemoryGB are the size's, for the node's capacity.
	VCPUs    int
	MemoryGB float64
	Image    ImageReference
	// PrivateIPs and PublicIPs are the addresses of the machine's NICs;
	// public ones are loopback addresses a process can listen on.
	PrivateIPs []string
	PublicIPs  []string
	// InboundNAT are the load-balancer NAT rules to the machine's NICs.
	InboundNAT    []NATRule
	AdminUsername string
	SSHPublicKeys []string
	// CustomData is the decoded custom data (cloud-init / cloudbase-init).
	CustomData []byte
	// ScaleSet and InstanceID are set for scale-set instances.
	ScaleSet   string
	InstanceID string
	// Outbound is the machine's way to the internet for a protocol (Tcp or
	// Udp), asked of the emulator's resources as they are when it is
	// called: a NAT gateway attached after boot counts (outbound.go). Nil
	// for machines not made by the emulator.
	Outbound func(protocol string) (Egress, error)
	// NextHop is the route Azure picks for a packet the machine sends to
	// an address, asked of the emulator's resources when called: a route
	// table attached or a route written after boot counts (nexthop.go).
	// Nil for machines not made by the emulator.
	NextHop func(dest netip.Addr) (Hop, error)
	// DataDisks are the managed data disks attached to the VM, read from
	// the emulator's resources when called: a disk attached or detached
	// after boot counts (datadisks.go). Nil for machines not made by the
	// emulator and for scale-set instances, whose data disks the emulator
	// does not model.
	DataDisks func() []DataDisk
	// IMDS is the base URL of the machine's Instance Metadata Service
	// (imds.go): what http://169.254.169.254 is on Azure, with an
	// unguessable path of this machine's own. Its token endpoint is IMDS +
	// "/metadata/identity/oauth2/token". Empty without an Entra directory.
	IMDS string
}

// DataDisk is a managed data disk attached to a machine, as its VM's
// storageProfile.dataDisks and the disk resource say.
type DataDisk struct {
	LUN  int
	Name string
	// ID is the disk's ARM ID as the VM's model stores it.
	ID string
	// UniqueID is the disk's properties.uniqueId, a GUID.
	UniqueID string
	SizeGB   int
	// Caching is None, ReadOnly or ReadWrite.
	Caching string
}

// NATRule forwards a load balancer's frontend port to a machine's port.
type NATRule struct {
	Name string
	// Frontend is the public address and port (host:port).
	Frontend    string
	BackendPort int
}

// ImageReference is the image a machine was created from.
type ImageReference struct {
	Publisher, Offer, SKU, Version string
	ID                             string
	CommunityGalleryImageID        string
	SharedGalleryImageID           string
}

// MachineRuntime runs provisioned machines. Boot is called once a VM or
// instance has provisioned (after its boot delay), and again when a stopped
// or deallocated one is started; an error marks the machine's boot failed in
// its instance view. Halt switches a machine off and keeps its disk (power
// off, deallocate, the first half of a restart). Stop is called when the VM
// is deleted or reimaged, and when the emulator closes: the disk goes.
type MachineRuntime interface {
	Boot(ctx context.Context, m Machine) error
	Halt(ctx context.Context, id string) error
	Stop(ctx context.Context, id string) error
}

// RecordingRuntime is a MachineRuntime that only records what it is asked,
// for tests of the emulator and of code above it that needs no real machines.
type RecordingRuntime struct {
	mu      sync.Mutex
	booted  map[string]Machine
	stopped []string
	halted  []string
	// Fail, when set, makes Boot fail for the machines it returns an error for.
	Fail func(Machine) error
	// Hold, when set, is called as Boot ("boot"), Stop ("stop") and Halt
	// ("halt") begin:
	// a test blocks in it to see the machine's state while the runtime works.
	Hold func(op, id string)
	// Answer, when set, is what RunCommand returns for a script.
	Answer func(id string, c Command) (CommandResult, error)
	// Serial, when set, is a machine's serial console.
	Serial   func(id string) []byte
	commands []Command
}

// Boot records the machine.
func (r *RecordingRuntime) Boot(_ context.Context, m Machine) error {
	if r.Hold != nil {
		r.Hold("boot", m.ID)
	}
	if r.Fail != nil {
		if err := r.Fail(m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.booted == nil {
		r.booted = map[string]Machine{}
	}
	r.booted[key(m.ID)] = m
	return nil
}

// Stop records the stop and forgets the machine.
func (r *RecordingRuntime) Stop(_ context.Context, id string) error {
	if r.Hold != nil {
		r.Hold("stop", id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.booted, key(id))
	r.stopped = append(r.stopped, id)
	return nil
}

// Halt records the machine switched off.
func (r *RecordingRuntime) Halt(_ context.Context, id string) error {
	if r.Hold != nil {
		r.Hold("halt", id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.booted, key(id))
	r.halted = append(r.halted, id)
	return nil
}

// Halted returns the IDs of the machines switched off so far.
func (r *RecordingRuntime) Halted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.halted...)
}

// Running returns the machines booted and not stopped or halted.
func (r *RecordingRuntime) Running() []Machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Machine, 0, len(r.booted))
	for _, m := range r.booted {
		out = append(out, m)
	}
	return out
}

// Stopped returns the IDs of the machines stopped so far.
func (r *RecordingRuntime) Stopped() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.stopped...)
}

// GuestAgent is what a MachineRuntime may also do: answer for the Azure VM
// agent inside a running machine. Run Command hands the agent a script
// (the Compute REST spec's RunCommandInput and VirtualMachineRunCommand),
// and boot diagnostics read what the machine wrote to its serial port. A
// runtime without it boots machines that nobody can run a command on: the
// emulator says so instead of pretending.
type GuestAgent interface {
	// RunCommand runs a script on a running machine as the VM agent
	// does (Windows: PowerShell as SYSTEM; Linux: sh as root). An error
	// means the agent could not run it at all; a script that fails is a
	// result with its exit code and error stream.
	RunCommand(ctx context.Context, id string, c Command) (CommandResult, error)
	// SerialConsole is what the machine has written to its serial
	// console so far, kept while the machine is switched off.
	SerialConsole(ctx context.Context, id string) ([]byte, error)
}

// Shells the VM agent runs scripts with: RunPowerShellScript on Windows,
// RunShellScript on Linux.
const (
	ShellPowerShell = "powershell"
	ShellSh         = "sh"
)

// Command is a script for a machine's VM agent.
type Command struct {
	Shell  string
	Script []string
	// Parameters are the run command's name/value pairs, in order.
	Parameters [][2]string
}

// CommandResult is what a script left: its whole output and error streams
// (the emulator keeps the last 4,096 bytes of each, as Azure does) and its
// exit code.
type CommandResult struct {
	Stdout, Stderr string
	ExitCode       int
}

var _ GuestAgent = (*RecordingRuntime)(nil)

// RunCommand records the script and answers with Answer, or with an empty
// success when it is unset.
func (r *RecordingRuntime) RunCommand(_ context.Context, id string, c Command) (CommandResult, error) {
	r.mu.Lock()
	r.commands = append(r.commands, c)
	answer := r.Answer
	r.mu.Unlock()
	if answer == nil {
		return CommandResult{}, nil
	}
	return answer(id, c)
}

// SerialConsole answers with Serial, or nothing when it is unset.
func (r *RecordingRuntime) SerialConsole(_ context.Context, id string) ([]byte, error) {
	if r.Serial == nil {
		return nil, nil
	}
	return r.Serial(id), nil
}

// Commands returns the scripts run so far.
func (r *RecordingRuntime) Commands() []Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Command(nil), r.commands...)
}
