// Package standalone runs the Azure emulator on its own, as `winkube
// emulator` does: ARM and its Entra ID side by side, a service principal
// to start with when no directory is given, and the resources kept in a
// file across restarts. The local world wires the same two servers with its
// machine runtime instead.
package standalone

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
)

// BootstrapName is the display name of the service principal made when
// there is no directory file; a restart from the state finds it by it.
const BootstrapName = "winkube-emulator"

// Options is what the emulator is started with.
type Options struct {
	// Listen and EntraListen are the addresses of ARM and of Entra ID
	// (host:port; port 0 picks a free one).
	Listen, EntraListen string
	// DirectoryFile holds principals, role assignments and trusted
	// issuers; "" makes a service principal with Contributor and User
	// Access Administrator on every subscription.
	DirectoryFile string
	// Tenant is the subscriptions' tenant; TenantSet says it was chosen,
	// not defaulted: a DirectoryFile of several tenants keeps every
	// tenant's tokens unless it is.
	Tenant    string
	TenantSet bool
	// Operators are client IDs of the principals, besides the bootstrap
	// one, that may use the control API.
	Operators []string
	// State is the file the resources are loaded from and saved to ("" for
	// none); the directory is kept beside it as entra.json.
	State string
	// CAFile is where the CA certificate is written: "" for beside State,
	// or a temporary folder.
	CAFile                                           string
	OperationDelay, BootDelayLinux, BootDelayWindows time.Duration
	Throttle                                         arm.Throttle
}

// ErrDirectoryFile marks a DirectoryFile that cannot be read or loaded.
var ErrDirectoryFile = errors.New("the directory file")

// UnknownOperatorError is an operator client ID the directory lacks.
type UnknownOperatorError struct{ ClientID string }

func (e *UnknownOperatorError) Error() string {
	return fmt.Sprintf("no principal with client ID %s in the directory", e.ClientID)
}

// Emulator is a running ARM and Entra ID.
type Emulator struct {
	ARM   *arm.Server
	Login *entra.Server
	Dir   *entra.Directory
	// Bootstrap is the service principal made at the first start (nil
	// with a directory file) and BootstrapSecret its secret.
	Bootstrap       *entra.Principal
	BootstrapSecret string
	// CAFile holds the CA certificate clients must trust.
	CAFile string
	// Loaded says the resources came from State.
	Loaded bool

	state, dirState string
}

// Start loads the directory and the state and serves ARM and Entra ID.
func Start(o Options) (*Emulator, error) {
	e := &Emulator{state: o.State}
	if o.State != "" {
		e.dirState = filepath.Join(filepath.Dir(o.State), "entra.json")
	}
	if err := e.directory(o); err != nil {
		return nil, err
	}
	// The control API acts on every subscription: only the operators may
	// use it, not every principal with a role somewhere.
	var operators []string
	if e.Bootstrap != nil {
		operators = append(operators, e.Bootstrap.ObjectID)
	}
	for _, id := range o.Operators {
		p, ok := e.Dir.Principal(id)
		if !ok {
			return nil, &UnknownOperatorError{ClientID: id}
		}
		operators = append(operators, p.ObjectID)
	}
	// The subscriptions are in the tenant: tokens of other tenants are
	// refused as ARM refuses them.
	tenant := o.Tenant
	switch {
	case o.TenantSet:
	case e.Bootstrap != nil:
		tenant = e.Bootstrap.TenantID
	case o.DirectoryFile != "":
		tenant = ""
	}
	srv, err := arm.New(arm.Options{
		Directory: e.Dir, TenantID: tenant, Operators: operators, OperationDelay: o.OperationDelay,
		BootDelayLinux: o.BootDelayLinux, BootDelayWindows: o.BootDelayWindows, Throttle: o.Throttle,
	})
	if err != nil {
		return nil, err
	}
	if o.State != "" {
		switch err := srv.Load(o.State); {
		case err == nil:
			e.Loaded = true
		case errors.Is(err, fs.ErrNotExist):
		default:
			return nil, fmt.Errorf("loading the state %s: %w", o.State, err)
		}
	}
	if err := srv.Start(o.Listen); err != nil {
		return nil, err
	}
	e.ARM = srv
	if err := e.serveLogin(o); err != nil {
		_ = srv.Close()
		return nil, err
	}
	return e, nil
}

// directory loads the directory file, else the one saved beside the state
// (finding the bootstrap principal again, to print it), else makes the
// bootstrap principal.
func (e *Emulator) directory(o Options) error {
	dir, err := entra.New(entra.Options{})
	if err != nil {
		return err
	}
	e.Dir = dir
	switch _, statErr := os.Stat(e.dirState); {
	case o.DirectoryFile != "":
		if err := dir.LoadFile(o.DirectoryFile); err != nil {
			return fmt.Errorf("%w %s: %w", ErrDirectoryFile, o.DirectoryFile, err)
		}
	case e.dirState != "" && statErr == nil:
		if err := dir.LoadFile(e.dirState); err != nil {
			return fmt.Errorf("loading the directory beside the state: %w", err)
		}
		if snap, err := dir.Snapshot(); err == nil {
			for _, p := range snap.Principals {
				if p.DisplayName == BootstrapName && len(p.Secrets) > 0 {
					e.Bootstrap, e.BootstrapSecret = &p, p.Secrets[0]
				}
			}
		}
	default:
		p, secret, err := dir.CreateServicePrincipal(o.Tenant, BootstrapName)
		if err != nil {
			return err
		}
		if err := dir.AssignRole(p.ObjectID, "Contributor", "/"); err != nil {
			return err
		}
		// A manager acting as it gives the flavors' machines'
		// system-assigned identities their roles, as an Owner would.
		if err := dir.AssignRole(p.ObjectID, "User Access Administrator", "/"); err != nil {
			return err
		}
		e.Bootstrap, e.BootstrapSecret = &p, secret
	}
	return nil
}

// serveLogin serves Entra ID with a certificate of ARM's CA, and writes
// that CA where clients read it.
func (e *Emulator) serveLogin(o Options) error {
	host, _, err := net.SplitHostPort(o.EntraListen)
	if err != nil {
		return fmt.Errorf("the Entra ID address %q: %w", o.EntraListen, err)
	}
	cert, err := e.ARM.ServerCertificate(host)
	if err != nil {
		return err
	}
	if e.Login, err = entra.Serve(e.Dir, o.EntraListen, cert); err != nil {
		return err
	}
	e.ARM.SetLoginEndpoint(e.Login.URL())
	e.CAFile = o.CAFile
	if e.CAFile == "" {
		dir := ""
		if o.State != "" {
			dir = filepath.Dir(o.State)
		} else if dir, err = os.MkdirTemp("", "winkube-emulator-"); err != nil {
			return err
		}
		e.CAFile = filepath.Join(dir, "emulator-ca.pem")
	}
	if err := os.WriteFile(e.CAFile, e.ARM.CACertPEM(), 0o644); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	return nil
}

// Save writes the resources and the directory to the state, if any.
func (e *Emulator) Save() error {
	if e.state == "" {
		return nil
	}
	if err := e.Dir.Save(e.dirState); err != nil {
		return err
	}
	return e.ARM.Save(e.state)
}

// Close stops both servers.
func (e *Emulator) Close() {
	if e.Login != nil {
		_ = e.Login.Close()
	}
	_ = e.ARM.Close()
}
