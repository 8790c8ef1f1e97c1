package localworld

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RunOptions is what Run does with a world beyond starting it.
type RunOptions struct {
	// ReadyTimeout bounds the wait for every node to be Ready.
	ReadyTimeout time.Duration
	// Images are loaded into the world's registry before its cluster is
	// made (LoadImages' paths).
	Images []string
	// Ready is told where the kubeconfigs are once the cluster is ready.
	Ready func(mgmtKubeconfig, workloadKubeconfig string)
}

// Run is 'winkube up' without its command line: it starts the world, makes
// its cluster, waits until it is ready and keeps it running until ctx ends.
// Down's request (SIGUSR1 to the holder of the state directory's lock)
// makes it delete the cluster before it stops; an interrupt stops it and
// keeps the state for the next Run.
func Run(ctx context.Context, wo Options, ro RunOptions) error {
	deleteReq := make(chan os.Signal, 1)
	signal.Notify(deleteReq, deleteSignal)
	defer signal.Stop(deleteReq)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deleting atomic.Bool
	go func() {
		select {
		case <-deleteReq:
			deleting.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	w, err := Start(ctx, wo)
	if err != nil {
		return err
	}
	defer func() {
		wo.Progress("stopping: machines, emulator, controllers, management plane")
		w.Stop()
	}()
	if len(ro.Images) > 0 {
		loaded, err := LoadImages(ctx, wo.StateDir, ro.Images, "", wo.Progress)
		for _, l := range loaded {
			wo.Progress("loaded " + l.String())
		}
		if err != nil {
			return err
		}
	}
	if _, _, err := w.WriteKubeconfigs(ctx); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	err = w.CreateCluster(ctx)
	if err == nil {
		wctx, stop := context.WithTimeout(ctx, ro.ReadyTimeout)
		err = w.WaitReady(wctx)
		stop()
	}
	if err == nil {
		mgmt, workload, werr := w.WriteKubeconfigs(ctx)
		if werr != nil {
			return werr
		}
		if ro.Ready != nil {
			ro.Ready(mgmt, workload)
		}
		<-ctx.Done()
	}
	if deleting.Load() {
		dctx, stop := context.WithTimeout(context.Background(), 10*time.Minute)
		defer stop()
		return w.DeleteCluster(dctx)
	}
	if ctx.Err() != nil {
		return nil // interrupted: the state directory keeps the management data
	}
	return err
}

// Down is 'winkube down' without its command line: it deletes the cluster
// of the world in wo.StateDir, through the Run that holds the directory's
// lock or, when none does, through a world started for it, then removes
// the world's files (RemoveWorld: only what a world makes there). The
// caller has checked the directory with CheckWorld.
func Down(ctx context.Context, wo Options) error {
	// Two downs of one world: the one holding the lock is asked as a Run
	// would be, and must not die of it.
	ignore := make(chan os.Signal, 1)
	signal.Notify(ignore, deleteSignal)
	defer signal.Stop(ignore)
	// Whether a Run holds the world is its lock's to say: the process that
	// holds it is signalled, never a pid read from a file, which a crashed
	// up leaves behind for another process to reuse.
	pid, err := SignalHolder(wo.StateDir, deleteSignal)
	if err != nil {
		return err
	}
	if pid > 0 {
		wo.Progress(fmt.Sprintf("asked winkube up (pid %d) to delete the cluster and stop", pid))
		if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
			_, held, err := Holder(wo.StateDir)
			return !held, err
		}); err != nil {
			return err
		}
	} else {
		w, err := Start(ctx, wo)
		if err != nil {
			return err
		}
		err = w.DeleteCluster(ctx)
		w.Stop()
		if err != nil {
			return err
		}
	}
	kept, err := RemoveWorld(wo.StateDir)
	if err != nil {
		return err
	}
	if len(kept) > 0 {
		wo.Progress(fmt.Sprintf("removed the world's files from %s and kept what winkube did not make there: %s", wo.StateDir, strings.Join(kept, ", ")))
		return nil
	}
	wo.Progress("removed " + wo.StateDir)
	return nil
}
