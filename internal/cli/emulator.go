package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/emulator/arm"
)

type emulatorOptions struct {
	listen           string
	token            string
	state            string
	caFile           string
	operationDelay   time.Duration
	bootDelayLinux   time.Duration
	bootDelayWindows time.Duration
	readsPerHour     int
	writesPerHour    int
	saveEvery        time.Duration
}

func newEmulatorCommand() *cobra.Command {
	o := &emulatorOptions{}
	cmd := &cobra.Command{
		Use:   "emulator",
		Short: "Run the Azure Resource Manager emulator on its own",
		Long: `Run winkube's Azure Resource Manager emulator: resource groups, networking,
VMs, disks, scale sets, the VM image catalog and resource SKUs, served over
HTTPS with a CA of its own. Point the Azure SDK (or winkube manager) at it to
try cluster definitions without an Azure subscription.

Standalone, VMs provision but nothing boots them: 'winkube up' adds the
machine runtime that turns them into Kubernetes nodes.

With --state the resources survive a restart: they are loaded at start and
saved on exit (and every --save-every).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runEmulator(ctx, cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8443", "address to serve ARM on (port 0 picks a free one)")
	f.StringVar(&o.token, "token", "", "bearer token clients must present (random when empty)")
	f.StringVar(&o.state, "state", "", "file to load resources from and save them to")
	f.StringVar(&o.caFile, "ca-file", "", "where to write the CA certificate clients must trust (beside --state, or in a temporary folder)")
	f.DurationVar(&o.operationDelay, "operation-delay", 100*time.Millisecond, "how long each long-running operation takes")
	f.DurationVar(&o.bootDelayLinux, "boot-delay-linux", time.Second, "extra provisioning time of a Linux VM")
	f.DurationVar(&o.bootDelayWindows, "boot-delay-windows", 3*time.Second, "extra provisioning time of a Windows VM (Windows boots slower, as on Azure)")
	f.IntVar(&o.readsPerHour, "reads-per-hour", 0, "per-subscription read budget before 429s (0: unlimited)")
	f.IntVar(&o.writesPerHour, "writes-per-hour", 0, "per-subscription write budget before 429s (0: unlimited)")
	f.DurationVar(&o.saveEvery, "save-every", 30*time.Second, "how often to save --state while running")
	return cmd
}

func runEmulator(ctx context.Context, cmd *cobra.Command, o *emulatorOptions) error {
	if o.token == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		o.token = hex.EncodeToString(b[:])
	}
	if o.readsPerHour < 0 || o.writesPerHour < 0 {
		return badInputf(cmd, "--reads-per-hour %d, --writes-per-hour %d: the rates cannot be negative", o.readsPerHour, o.writesPerHour)
	}
	srv, err := arm.New(arm.Options{
		Token: o.token, OperationDelay: o.operationDelay,
		BootDelayLinux: o.bootDelayLinux, BootDelayWindows: o.bootDelayWindows,
		Throttle: arm.Throttle{ReadsPerHour: o.readsPerHour, WritesPerHour: o.writesPerHour},
	})
	if err != nil {
		return err
	}
	if o.state != "" {
		switch err := srv.Load(o.state); {
		case err == nil:
			fmt.Fprintf(cmd.OutOrStdout(), "loaded resources from %s\n", o.state)
		case errors.Is(err, fs.ErrNotExist):
		default:
			return fmt.Errorf("loading --state: %w", err)
		}
	}
	if err := srv.Start(o.listen); err != nil {
		return err
	}
	defer srv.Close()
	caFile := o.caFile
	if caFile == "" {
		dir := ""
		if o.state != "" {
			dir = filepath.Dir(o.state)
		} else if dir, err = os.MkdirTemp("", "winkube-emulator-"); err != nil {
			return err
		}
		caFile = filepath.Join(dir, "emulator-ca.pem")
	}
	if err := os.WriteFile(caFile, srv.CACertPEM(), 0o644); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "ARM emulator serving on %s\n\n", srv.URL())
	fmt.Fprintf(out, "Point the Azure SDK at it:\n")
	fmt.Fprintf(out, "  AZURE_RESOURCE_MANAGER_ENDPOINT=%s\n", srv.URL())
	fmt.Fprintf(out, "  AZURE_CA_FILE=%s\n", caFile)
	fmt.Fprintf(out, "  AZURE_TOKEN=%s\n\n", o.token)
	fmt.Fprintf(out, "  (cloud.Configuration with ResourceManager endpoint and audience %s,\n   a transport that trusts %s, and a credential returning the token)\n", srv.URL(), caFile)
	fmt.Fprintf(out, "Counters: GET %s/emulator/counters   Faults: PUT %s/emulator/faults\n", srv.URL(), srv.URL())

	save := func() error {
		if o.state == "" {
			return nil
		}
		return srv.Save(o.state)
	}
	tick := time.NewTicker(o.saveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := save(); err != nil {
				return fmt.Errorf("saving --state: %w", err)
			}
			if o.state != "" {
				fmt.Fprintf(out, "saved resources to %s\n", o.state)
			}
			return nil
		case <-tick.C:
			if err := save(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "saving --state: %v\n", err)
			}
		}
	}
}
