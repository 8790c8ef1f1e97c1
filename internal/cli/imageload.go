package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/localworld"
)

type imageLoadOptions struct {
	local, stateDir, ref string
}

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Container images of a local world (load your own)",
		Long: `Container images of a local world ('winkube up'). The world's registry stands
in for every public registry its nodes pull from; 'image load' adds your own
images to it. (Node VM images are 'winkube images'.)`,
	}
	cmd.AddCommand(newImageLoadCommand())
	return cmd
}

func newImageLoadCommand() *cobra.Command {
	o := &imageLoadOptions{}
	cmd := &cobra.Command{
		Use:   "load PATH...",
		Short: "Load images from docker save tarballs or OCI layouts into a running local world",
		Long: `Load images into the registry of a running local world, as 'kind load' does
for kind: the world's nodes cannot reach your private registry, so the image
comes from a file. Each PATH is one of:

  a docker save tarball   docker save -o app.tar example.com/app:1.0
  an OCI archive          docker buildx build --output type=oci,dest=app.tar,name=example.com/app:1.0 .
  an OCI layout directory docker buildx build --output type=oci,tar=false,dest=app/,name=example.com/app:1.0 .
                          (or skopeo copy docker://example.com/app:1.0 oci:app)

Gzipped tarballs are read too. Each image is published under the reference
it was saved or built with (the tarball's repository tag; a layout's
io.containerd.image.name, or org.opencontainers.image.ref.name when that is a
full reference); --ref names a path's one image when it has no name, or
renames it. Pods then use that reference as written (image: example.com/app:1.0):
the world's registry answers for every registry host.

The manifest list (index) and every platform's config are kept as built: the
OS, architecture and Windows os.version decide where the image runs, as on a
node. A process-isolated Windows image runs only on a node of its build
(10.0.20348 on 2022; a 2025 node also runs 2022 images) and the kubelet
refuses it elsewhere with containerd's error; winkube's admission places a
pod on a node of its image's build. Entrypoint, Cmd, WorkingDir, Env and
exposed ports are what the node runs and probes. Loading a tag again
replaces it; pods already running keep the image they pulled.

Only winkube writes to the world's registry: 'image load' pushes through a
socket in the state directory (registry-push.sock, mode 0600) that only the
world's owner may open. The registry's port, which pods and every user of
the machine reach, serves pulls and refuses every push.`,
		Example: `  docker save -o app.tar example.com/app:1.0
  winkube image load app.tar
  winkube image load --local demo ./app-oci-layout/
  winkube image load --ref example.com/app:1.0 app-by-id.tar
  winkube up --image app.tar          # load while the world starts`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			local := o.local
			if local == "" && o.stateDir == "" {
				local = "winkube"
			}
			dir, _, err := localWorld(cmd, local, o.stateDir)
			if err != nil {
				return err
			}
			for _, p := range args {
				if _, err := os.Stat(p); err != nil {
					return badInputf(cmd, "image path %s: %v", p, err)
				}
			}
			if o.ref != "" && len(args) > 1 {
				return badInputf(cmd, "--ref names one image: give one PATH with it")
			}
			loaded, err := localworld.LoadImages(cmd.Context(), dir, args, o.ref, progressPrinter(cmd.ErrOrStderr()))
			for _, l := range loaded {
				fmt.Fprintf(cmd.OutOrStdout(), "loaded %s\n", l)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&o.local, "local", "", "the local world of this name (default winkube, as 'winkube up')")
	cmd.Flags().StringVar(&o.stateDir, "state-dir", "", "the local world whose state is in this directory")
	cmd.Flags().StringVar(&o.ref, "ref", "", "publish the one image of PATH under this reference (example.com/app:1.0)")
	_ = cmd.RegisterFlagCompletionFunc("local", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return localWorlds(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}
