package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/winkube/winkube/internal/localworld"
)

// imageLoadOptions is `winkube image load`'s input, split as generate
// cluster's is (clusterctl's cmd/ and client/, kubernetes-sigs/cluster-api
// cmd/clusterctl/cmd/generate_cluster.go @8961830d); localworld pushes.
type imageLoadOptions struct {
	local, stateDir, ref string
	// Paths are the PATH arguments.
	Paths []string
}

// Validate refuses a --ref no image could carry, naming the flag, before
// the world or the files are read.
func (o *imageLoadOptions) Validate() error {
	if o.ref == "" {
		return nil
	}
	if len(o.Paths) > 1 {
		return badInputf(nil, "--ref names one image: give one PATH with it")
	}
	// As the world's registry parses the references it serves.
	if _, err := name.ParseReference(o.ref); err != nil {
		return badInputf(nil, "--ref %q is not an image reference (%v): write it as example.com/app:1.0", o.ref, err)
	}
	return nil
}

// Run pushes the images into the running world's registry, naming each
// one loaded on out and the progress on errOut.
func (o *imageLoadOptions) Run(ctx context.Context, out, errOut io.Writer) error {
	local := o.local
	if local == "" && o.stateDir == "" {
		local = "winkube"
	}
	dir, _, err := localWorld(nil, local, o.stateDir)
	if err != nil {
		return err
	}
	for _, p := range o.Paths {
		if _, err := os.Stat(p); err != nil {
			return badInputf(nil, "image path %s: %v", p, err)
		}
	}
	loaded, err := localworld.LoadImages(ctx, dir, o.Paths, o.ref, progressPrinter(errOut))
	for _, l := range loaded {
		fmt.Fprintf(out, "loaded %s\n", l)
	}
	return err
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
			o.Paths = args
			return validThenRun(cmd, o, func() error { return o.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()) })
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
