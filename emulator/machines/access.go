package machines

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/winkube/winkube/emulator/machines/bootdata"
	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/emulator/machines/kubelet"
	"github.com/winkube/winkube/emulator/machines/sshd"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
)

// SSHPort is where every machine's SSH server listens on its address.
const SSHPort = 22

func (m *machine) windows() bool { return strings.EqualFold(m.arm.OS, "Windows") }

// disk is the machine's filesystem; the login user's home is the shell's.
func (m *machine) disk(user string) vmdisk.Disk {
	return vmdisk.Disk{Root: filepath.Join(m.dir, "root"), Windows: m.windows(), User: user}
}

// authorizedKeys are the logins the machine's boot gives: each cloud-init
// user's ssh_authorized_keys, and on Linux the VM's SSH keys for its admin
// user. Windows has no VM SSH keys: its admin password is random, and only
// the boot data's users get in.
func (r *Runtime) authorizedKeys(m *machine, b *bootdata.BootData) (map[string][]ssh.PublicKey, string) {
	keys := map[string][]ssh.PublicKey{}
	add := func(user, line string) {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			m.logs.Write(vmdisk.Boot, "users: an SSH key of %s is unreadable and was skipped: %v", user, err)
			return
		}
		keys[user] = append(keys[user], k)
	}
	login := m.arm.AdminUsername
	if b != nil {
		for _, u := range b.Users {
			for _, k := range u.SSHAuthorizedKeys {
				add(u.Name, k)
			}
			if len(u.SSHAuthorizedKeys) > 0 && (login == "" || m.windows()) {
				login = u.Name
			}
		}
	}
	if !m.windows() && m.arm.AdminUsername != "" {
		for _, k := range m.arm.SSHPublicKeys {
			add(m.arm.AdminUsername, k)
		}
	}
	if login == "" {
		login = "capi"
	}
	return keys, login
}

// startAccess gives a booting machine its SSH server and the load
// balancer's NAT rules to it. A control-plane machine is a jump host: it
// forwards to the addresses of the machines in the virtual network, and
// nowhere else. b is nil when the boot data could not be read; the
// machine still lets its VM keys in, so its boot log can be read.
func (r *Runtime) startAccess(m *machine, b *bootdata.BootData, host netip.Addr) error {
	keys, login := r.authorizedKeys(m, b)
	disk := m.disk(login)
	shell := &vmshell.Machine{Hostname: m.hostname(), Disk: disk, KubeletVersion: r.kubeletVersion(m), HNS: r.hns(m), Dial: r.nodeDial(m)}
	if b != nil && b.Role == bootdata.Plain {
		shell.Node = handHost{r, m}
		if m.windows() {
			if rel, err := windowsReleaseOf(m.arm.Image); err == nil {
				shell.Build = strings.TrimPrefix(windowsBuilds[rel].build, "10.0.")
			}
		}
	}
	cfg := sshd.Config{
		Address:        net.JoinHostPort(host.String(), strconv.Itoa(SSHPort)),
		HostKeyFile:    filepath.Join(m.dir, "root", "etc", "ssh", "ssh_host_ed25519_key"),
		AuthorizedKeys: keys, Shell: shell,
		Audit: func(format string, args ...any) { m.logs.Write(vmdisk.SSHD, format, args...) },
	}
	if m.windows() {
		cfg.HostKeyFile = filepath.Join(m.dir, "root", "ProgramData", "ssh", "ssh_host_ed25519_key")
	}
	if b != nil && b.Role != bootdata.Join {
		cfg.Forward = func(addr string, port int) (net.Conn, error) {
			h, ok := r.opts.Network.Lookup(addr)
			if !ok {
				// The node's InternalIP as kubectl shows it is, in the
				// local world, the machine's host address: a user who
				// copies it from 'kubectl get nodes -o wide' means the
				// same machine as its VNet address.
				if a, err := netip.ParseAddr(addr); err == nil {
					if _, known := r.opts.Network.Private(a); known {
						h, ok = a, true
					}
				}
			}
			if !ok {
				return nil, fmt.Errorf("%s is not the address of a machine in this virtual network: the jump host forwards to node addresses only", addr)
			}
			return hostnet.Dial(net.JoinHostPort(h.String(), strconv.Itoa(port)))
		}
	}
	srv, err := sshd.Start(cfg)
	if err != nil {
		return err
	}
	r.mu.Lock()
	m.sshd = srv
	r.mu.Unlock()
	n := 0
	for _, ks := range keys {
		n += len(ks)
	}
	m.logs.Write(vmdisk.Boot, "ssh: listening on %s, %d authorized key(s), password login disabled", srv.Addr(), n)
	if b != nil && b.Role == bootdata.Plain {
		// A plain VM is reached as 'az vm create' leaves it: on its NIC's
		// public address, here its SSH port only.
		for _, pip := range m.arm.PublicIPs {
			front, backend := net.JoinHostPort(pip, strconv.Itoa(SSHPort)), net.JoinHostPort(host.String(), strconv.Itoa(SSHPort))
			if err := r.opts.Network.AddBackend(front, backend); err != nil {
				return fmt.Errorf("public IP %s: %w", pip, err)
			}
			r.mu.Lock()
			m.nat = append(m.nat, [2]string{front, backend})
			r.mu.Unlock()
		}
	}
	for _, nat := range m.arm.InboundNAT {
		backend := net.JoinHostPort(host.String(), strconv.Itoa(nat.BackendPort))
		if err := r.opts.Network.AddBackend(nat.Frontend, backend); err != nil {
			return fmt.Errorf("inbound NAT rule %s: %w", nat.Name, err)
		}
		r.mu.Lock()
		m.nat = append(m.nat, [2]string{nat.Frontend, backend})
		r.mu.Unlock()
	}
	return nil
}

// stopAccess closes the machine's SSH server and takes it out of the NAT
// rules; the caller has switched the machine off.
func (r *Runtime) stopAccess(m *machine) {
	r.mu.Lock()
	srv, nat := m.sshd, m.nat
	m.sshd, m.nat = nil, nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	for _, fb := range nat {
		r.opts.Network.RemoveBackend(fb[0], fb[1])
	}
}

func (r *Runtime) kubeletVersion(m *machine) func() string {
	return func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return m.kubeletVersion
	}
}

func (r *Runtime) hns(m *machine) func() ([]kubelet.HNSNetwork, []kubelet.HNSEndpoint) {
	return func() ([]kubelet.HNSNetwork, []kubelet.HNSEndpoint) {
		r.mu.Lock()
		k := m.kubelet
		r.mu.Unlock()
		if k == nil {
			return nil, nil
		}
		return k.HNS()
	}
}

func (m *machine) hostname() string {
	if m.arm.ComputerName != "" {
		return m.arm.ComputerName
	}
	return m.arm.Name
}

// logBootData writes what cloud-init (or cloudbase-init) does with the
// machine's custom data to its boot log, without the files' contents:
// they hold keys.
func logBootData(m *machine, b *bootdata.BootData) {
	m.logs.Write(vmdisk.Boot, "%s (winkube machine runtime): instance %s, hostname %s", agentName(m), m.arm.Name, m.hostname())
	if b == nil {
		return
	}
	for _, f := range b.Files {
		m.logs.Write(vmdisk.Boot, "write_files: %s (%d bytes, encoding %q, permissions %s)", f.Path, len(f.Raw), f.Encoding, f.Permissions)
	}
	for _, u := range b.Users {
		m.logs.Write(vmdisk.Boot, "users: %s (groups %q, %d SSH key(s))", u.Name, u.Groups, len(u.SSHAuthorizedKeys))
	}
	for _, c := range b.RunCmd {
		m.logs.Write(vmdisk.Boot, "runcmd: %s", c)
	}
}
