package controllers

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/providerid"
	"github.com/winkube/winkube/internal/azure/resourceskus"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/naming"
)

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azuremachinepools;azuremachinepools/status;azuremachinepools/finalizers;azuremachinepoolmachines;azuremachinepoolmachines/status;azuremachinepoolmachines/finalizers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinepools;machinepools/status;machines,verbs=get;list;watch;delete

// AzureMachinePoolReconciler provisions a MachinePool's scale set, keeps one
// AzureMachinePoolMachine per instance, and rolls model changes by surging
// new instances and removing old ones within maxSurge / maxUnavailable.
type AzureMachinePoolReconciler struct {
	Client client.Client
	// Reader reads the pool's instance objects live: a cached list that
	// lags a deletion would choose the same instance's replacement too.
	Reader client.Reader
	Cloud  *cloud.Cloud
	// Identities resolves the cluster's identity to its services.
	Identities *Identities
	Requeue    time.Duration
	// MinThrottleWait is the shortest wait after a 429 (see
	// Options.MinThrottleWait).
	MinThrottleWait time.Duration
	// RoleAssignmentScopes are where, beyond the cluster's resource group,
	// the manager grants a pool's identity its role (Options).
	RoleAssignmentScopes []string
}

// SetupWithManager registers the controller.
func (r *AzureMachinePoolReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	if r.Identities == nil {
		ids, err := newIdentities(mgr, r.Cloud, Options{})
		if err != nil {
			return err
		}
		r.Identities = ids
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureMachinePool{}, builder.WithPredicates(azureMachinePoolChanged)).
		// The pool owns its instances' machines without controlling them
		// (the Machines Cluster API makes for them do).
		Owns(&infrav1.AzureMachinePoolMachine{}, builder.MatchEveryOwner, builder.WithPredicates(poolMachineChanged)).
		// A MachinePool's spec (replicas, version, bootstrap data) is what
		// the pool follows; Cluster API rewrites its status as instances
		// come and go, which would wake the pool for nothing each time.
		Watches(&clusterv1.MachinePool{}, handler.EnqueueRequestsFromMapFunc(machinePoolToAzureMachinePool), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Only the Cluster changes this controller waits for (paused or
		// resumed, infrastructure provisioned), as Cluster API's and CAPZ's
		// machine controllers do: Cluster API updates a Cluster's status
		// for every machine that comes or goes, and each update would
		// wake all of the cluster's machines.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToObjects(r.Client, func() client.ObjectList { return &infrav1.AzureMachinePoolList{} })),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), mgr.GetLogger()))).
		WithOptions(opts).Named("azuremachinepool").Complete(r)
}

// poolContext is what a pool's reconcile reads before touching Azure.
type poolContext struct {
	amp     *infrav1.AzureMachinePool
	mp      *clusterv1.MachinePool
	cluster *clusterv1.Cluster
	ac      *infrav1.AzureCluster
	svc     *cloud.Services
	names   clusterNames
	owner   tags.Owner

	// What the phases of reconcileNormal hand on to those after them.
	customData []byte
	img        *infrav1.Image
	size       resourceskus.Size
	cur        *armcompute.VirtualMachineScaleSet
	spec       scalesets.Spec
	instances  []scalesets.Instance
	machines   map[string]*infrav1.AzureMachinePoolMachine
	replicas   int64
	desired    int64
	outdated   int
	waitReason string
	waitMsg    string
}

// Reconcile brings one pool's scale set to its MachinePool.
func (r *AzureMachinePoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	defer requeueWhenThrottled(ctx, r.MinThrottleWait, &res, &reterr)
	ctx = async.WithWait(ctx)
	s, err := openScope[*clusterv1.MachinePool](ctx, r.Client, req.NamespacedName, &infrav1.AzureMachinePool{})
	if s == nil {
		return ctrl.Result{}, err
	}
	defer s.close(ctx, &reterr)
	if stop, err := s.load(ctx, r.Client, poolOwner); stop {
		return ctrl.Result{}, err
	}
	amp, mp, cluster, deleting := s.obj, s.owner, s.cluster, s.deleting
	pc := &poolContext{amp: amp, mp: mp, cluster: cluster, ac: &infrav1.AzureCluster{}}
	if deleting {
		// What to delete is in the pool's own status.
		return r.reconcileDelete(ctx, pc)
	}
	if cluster != nil {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: amp.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, pc.ac); err != nil {
			return ctrl.Result{}, readBlocked(amp, false, "the AzureCluster", err)
		}
	}
	if pc.ac.Name != "" {
		if pc.svc, err = r.Identities.Services(ctx, pc.ac); err != nil {
			return ctrl.Result{}, err
		}
		dropForeignTokens(amp, pc.svc)
		if pc.owner, err = ownerOf(ctx, r.Client, cluster.Name, amp.Namespace); err != nil {
			return ctrl.Result{}, readBlocked(amp, false, "the AzureClusters", err)
		}
		ctx = tags.WithAdoptUnscoped(ctx, pc.owner.AdoptUnscoped)
		pc.names, err = namesOf(pc.ac, cluster.Name)
		if err != nil {
			setReady(amp, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
			return ctrl.Result{}, nil
		}
	}
	return r.reconcileNormal(ctx, pc)
}

// poolImage is the pool's image: the user's, or the default pinned in
// status.image while it is still a default for the request, so that a new
// marketplace build does not roll every default-image pool; a change of
// Kubernetes version, OS or Windows Server version resolves it again.
func (r *AzureMachinePoolReconciler) poolImage(ctx context.Context, pc *poolContext, req images.Request) (*infrav1.Image, error) {
	amp := pc.amp
	if amp.Spec.Template.Image != nil {
		amp.Status.Image = nil
		return amp.Spec.Template.Image, nil
	}
	if images.IsDefaultFor(amp.Status.Image, req) {
		return amp.Status.Image, nil
	}
	if amp.Status.Image == nil {
		// A pool made by a winkube that did not pin its default yet (or
		// whose status was lost, as clusterctl move loses it) runs the
		// default of its day: when the scale set's model is still a
		// default for the request, that is the pin, so that the first
		// pinning does not roll the pool onto a newer build.
		set, err := pc.svc.ScaleSets.Get(ctx, pc.names.rg, amp.Name)
		if err != nil {
			return nil, fmt.Errorf("reading the scale set's image: %w", err)
		}
		if running := defaultImageOf(scalesets.ModelImage(set)); images.IsDefaultFor(running, req) {
			amp.Status.Image = running
			return running, nil
		}
	}
	img, err := pc.svc.Images.Resolve(ctx, nil, req)
	if err == nil {
		amp.Status.Image = img.DeepCopy()
	}
	return img, err
}

// defaultImageOf is a model's image in the forms a default image takes
// (vmImage's inverse for a community-gallery or marketplace image); nil
// for any other image, which cannot be a default.
func defaultImageOf(img virtualmachines.Image) *infrav1.Image {
	if id := img.CommunityGalleryImageID; id != "" {
		// /CommunityGalleries/<gallery>/Images/<name>/Versions/<version>
		p := strings.Split(strings.TrimPrefix(id, "/"), "/")
		if len(p) != 6 || !strings.EqualFold(p[0], "CommunityGalleries") || !strings.EqualFold(p[2], "Images") || !strings.EqualFold(p[4], "Versions") {
			return nil
		}
		return &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: p[1], Name: p[3], Version: p[5]}}
	}
	if img.ID != "" || img.Publisher == "" {
		return nil
	}
	return &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{Publisher: img.Publisher, Offer: img.Offer, SKU: img.SKU, Version: img.Version}}
}

func (r *AzureMachinePoolReconciler) reconcileNormal(ctx context.Context, pc *poolContext) (ctrl.Result, error) {
	return runPhases(ctx, pc,
		r.holdPoolFinalizer, r.waitForPoolPrerequisites, r.choosePoolImage, r.buildScaleSetModel,
		r.claimScaleSet, r.rollInstances, r.writeScaleSet, r.reconcileInstanceMachines)
}

// holdPoolFinalizer saves the finalizer before anything is created.
func (r *AzureMachinePoolReconciler) holdPoolFinalizer(_ context.Context, pc *poolContext) (*ctrl.Result, error) {
	if controllerutil.AddFinalizer(pc.amp, infrav1.MachinePoolFinalizer) {
		return &ctrl.Result{RequeueAfter: persisted}, nil
	}
	return nil, nil
}

// waitForPoolPrerequisites waits for the cluster's infrastructure and the
// bootstrap data, then reads the bootstrap data.
func (r *AzureMachinePoolReconciler) waitForPoolPrerequisites(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, mp := pc.amp, pc.mp
	if pc.cluster == nil || !ptr.Deref(pc.cluster.Status.Initialization.InfrastructureProvisioned, false) {
		setReady(amp, metav1.ConditionFalse, WaitingForClusterInfraReason, "waiting for the cluster's infrastructure")
		return &ctrl.Result{}, nil
	}
	if res := waitForAzureCluster(amp, pc.ac); res != nil {
		return res, nil
	}
	if mp.Spec.Template.Spec.Bootstrap.DataSecretName == nil {
		setReady(amp, metav1.ConditionFalse, WaitingForBootstrapDataReason, "waiting for the bootstrap provider's data secret")
		return &ctrl.Result{}, nil
	}
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: amp.Namespace, Name: *mp.Spec.Template.Spec.Bootstrap.DataSecretName}, secret); err != nil {
		return &ctrl.Result{}, fmt.Errorf("reading the bootstrap data: %w", err)
	}
	pc.customData = secret.Data["value"]
	return nil, nil
}

// choosePoolImage names the scale set's computers and chooses its image and
// VM size.
func (r *AzureMachinePoolReconciler) choosePoolImage(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, mp := pc.amp, pc.mp
	t := &amp.Spec.Template
	checkCloudProviderCredentials(ctx, r.Identities, amp, t, pc.ac)
	windows := t.OS() == infrav1.Windows
	prefix := amp.Name
	if windows {
		prefix = naming.WindowsScaleSetPrefix(amp.Name)
	}
	amp.Status.ComputerNamePrefix = prefix
	amp.Status.InfrastructureMachineKind = "AzureMachinePoolMachine"
	img, err := r.poolImage(ctx, pc, images.Request{Location: pc.ac.Spec.Location, KubernetesVersion: mp.Spec.Template.Spec.Version,
		OS: t.OS(), WindowsVersion: t.WindowsServerVersion, Runtime: t.ContainerRuntime})
	if err != nil {
		if fromAzure(err) {
			// Listing the images failed (a 429, a 5xx, no answer): the
			// request is retried with backoff, not parked.
			reportAzureError(amp, "choosing the image", err)
			return &ctrl.Result{}, fmt.Errorf("choosing the image: %w", err)
		}
		setReady(amp, metav1.ConditionFalse, InvalidConfigurationReason, "choosing the image: "+err.Error())
		return &ctrl.Result{}, nil
	}
	size, offered, err := pc.svc.SKUs.VMSize(ctx, pc.ac.Spec.Location, t.VMSize)
	if err != nil {
		return stop(r.azureError(amp, "reading the VM size's capabilities", err))
	}
	if !offered {
		setReady(amp, metav1.ConditionFalse, InvalidConfigurationReason, fmt.Sprintf("VM size %s is not offered in %s", t.VMSize, pc.ac.Spec.Location))
		return &ctrl.Result{}, nil
	}
	pc.img, pc.size = img, size
	return nil, nil
}

// buildScaleSetModel reads the scale set and builds the model it should
// have.
func (r *AzureMachinePoolReconciler) buildScaleSetModel(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, mp, img, size := pc.amp, pc.mp, pc.img, pc.size
	t := &amp.Spec.Template
	n := pc.names
	cur, err := pc.svc.ScaleSets.Get(ctx, n.rg, amp.Name)
	if err != nil {
		return stop(r.azureError(amp, "reading the scale set", err))
	}
	// The scale set runs only in the zones the subscription may use this
	// size in (CAPZ's GetZonesWithVMSize); one made before keeps the zones
	// it has, which Azure never takes away from a scale set.
	zones := scalesets.Zones(cur)
	for _, z := range mp.Spec.FailureDomains {
		if size.InZone(z) && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	if cur == nil {
		// Nor is it made of an image the size cannot boot.
		asked := ""
		if len(mp.Spec.FailureDomains) > 0 && len(zones) == 0 {
			asked = mp.Spec.FailureDomains[0]
		}
		reason, msg, err := placementProblem(ctx, pc.svc, pc.ac.Spec.Location, size, asked, vmImage(img), t.AcceleratedNetworking)
		if err != nil {
			return stop(r.azureError(amp, "reading the image's generation", err))
		}
		if reason != "" {
			setReady(amp, metav1.ConditionFalse, reason, msg)
			if reason == SizeNotAvailableReason {
				return &ctrl.Result{RequeueAfter: restrictionRecheck}, nil
			}
			return &ctrl.Result{}, nil
		}
	}
	spec, err := scaleSetSpec(amp, pc.ac.Spec, n, vmImage(img), pc.customData, tags.Build(pc.owner, poolRole(amp), mergeMaps(pc.ac.Spec.AdditionalTags, amp.Spec.AdditionalTags)), zones, size, cur)
	if err != nil {
		setReady(amp, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return &ctrl.Result{}, nil
	}
	if spec.Windows {
		if spec.AdminPassword, err = randomPassword(); err != nil {
			return &ctrl.Result{}, err
		}
	}
	pc.cur, pc.spec = cur, spec
	return nil, nil
}

// scaleSetSpec is the scale set a pool asks Azure for, from its spec and what
// the reconcile read or chose (image, zones, the size's capabilities, the
// scale set as it is), without calling anything, as vmSpec is for a VM;
// CAPZ builds its scale set spec likewise as a plain value
// (azure/scope/machinepool.go ScaleSetSpec @69ec3a40). A Windows pool's
// admin password is the caller's (random, never stored); err says what in
// the spec to fix.
func scaleSetSpec(amp *infrav1.AzureMachinePool, cluster infrav1.AzureClusterSpec, n clusterNames, img virtualmachines.Image, customData []byte, tags map[string]*string, zones []string, size resourceskus.Size, cur *armcompute.VirtualMachineScaleSet) (scalesets.Spec, error) {
	t := &amp.Spec.Template
	windows := t.OS() == infrav1.Windows
	prefix := amp.Name
	if windows {
		prefix = naming.WindowsScaleSetPrefix(amp.Name)
	}
	spec := scalesets.Spec{
		ResourceGroup: n.rg, Name: amp.Name, Location: cluster.Location, Size: t.VMSize, Windows: windows, ComputerNamePrefix: prefix,
		Image: img, OSDiskSizeGB: ptr.Deref(t.OSDisk.DiskSizeGB, 128), CustomData: customData, AdminUsername: AdminUsername,
		SubnetID: armID(cluster.SubscriptionID, n.vnetRG, "Microsoft.Network", "virtualNetworks", n.vnet, "subnets", n.nodeSubnet.Name),
		Zones:    zones, Tags: tags,
	}
	spec.LastAppliedTags, _ = lastAppliedTags(amp)
	if md := t.OSDisk.ManagedDisk; md != nil {
		spec.StorageAccountType = md.StorageAccountType
	}
	// Unset follows the size, as CAPZ (scalesets/spec.go @69ec3a40); a
	// scale set made before keeps what it has, so that it does not roll.
	spec.Caching, spec.Accelerated = t.OSDisk.CachingType, ptr.Deref(t.AcceleratedNetworking, size.AcceleratedNetworking)
	spec.Identity, spec.UserAssigned = vmIdentity(t)
	if t.AcceleratedNetworking == nil && cur != nil {
		spec.Accelerated = scalesets.AcceleratedNetworking(cur)
	}
	if !windows {
		key, err := base64.StdEncoding.DecodeString(t.SSHPublicKey)
		if err != nil || len(key) == 0 {
			return spec, errors.New("spec.template.sshPublicKey is not a base64-encoded OpenSSH key")
		}
		spec.SSHPublicKey = strings.TrimSpace(string(key))
	}
	return spec, nil
}

// claimScaleSet records the scale set before it is created; one that exists
// without this pool's role tag is someone else's, and left alone.
func (r *AzureMachinePoolReconciler) claimScaleSet(_ context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, cur, n := pc.amp, pc.cur, pc.names
	setID := armID(pc.ac.Spec.SubscriptionID, n.rg, "Microsoft.Compute", "virtualMachineScaleSets", amp.Name)
	if cur != nil && ptr.Deref(cur.Tags[tags.RoleKey], "") != poolRole(amp) {
		unclaim(&amp.Status.CreatedResources, setID)
		setReady(amp, metav1.ConditionFalse, ResourceNotOwnedReason, fmt.Sprintf("scale set %s already exists and is not this pool's (role %q): winkube leaves it alone; rename this pool", amp.Name, ptr.Deref(cur.Tags[tags.RoleKey], "")))
		return &ctrl.Result{}, nil
	}
	if claim(&amp.Status.CreatedResources, setID) {
		return &ctrl.Result{RequeueAfter: persisted}, nil
	}
	return nil, nil
}

// rollInstances lists the instances, deletes the machines of vanished ones
// and those the rollout chose, and works out the capacity wanted.
func (r *AzureMachinePoolReconciler) rollInstances(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, mp, spec, n := pc.amp, pc.mp, pc.spec, pc.names
	// The objects are read before the instances: an object goes only once
	// its instance has (its finalizer), so an instance listed after has
	// its object here, or never had one. The other way round, an object
	// that went between the two reads left its instance, listed just
	// before it went, without one, and the pool made it a new object.
	machines, err := r.poolMachines(ctx, amp)
	if err != nil {
		return &ctrl.Result{}, err
	}
	instances, err := pc.svc.ScaleSets.Instances(ctx, n.rg, amp.Name)
	if err != nil {
		return stop(r.azureError(amp, "listing instances", err))
	}
	replicas := int64(ptr.Deref(mp.Spec.Replicas, 1))
	// An instance deleted outside winkube takes its machine with it, through
	// its Machine, which Cluster API's MachinePool then replaces.
	listed := map[string]bool{}
	for _, in := range instances {
		listed[in.InstanceID] = true
	}
	for id, m := range machines {
		if !listed[id] && m.DeletionTimestamp.IsZero() {
			log.FromContext(ctx).Info("the scale-set instance is gone: deleting its machine", "instance", id)
			if err := r.deleteInstanceMachine(ctx, m); err != nil {
				return &ctrl.Result{}, err
			}
		}
	}

	// Instances on their way out no longer count: those whose objects are
	// being deleted, and those Azure is deleting (provisioning state
	// Deleting), whose objects go once they are gone (the instance's
	// controller). Neither is chosen again: a second deletion of an
	// instance Azure is deleting is refused. While any is, the scale set is
	// left alone, so that its capacity only ever drops through the
	// instances chosen.
	var live []scalesets.Instance
	var leaving, replacing []string
	for _, in := range instances {
		m := machines[in.InstanceID]
		if in.ProvisioningState != "Deleting" && (m == nil || m.DeletionTimestamp.IsZero()) {
			live = append(live, in)
			continue
		}
		leaving = append(leaving, in.InstanceID)
		if in.ProvisioningState == "Failed" || m != nil && m.Status.ProvisioningState == "Failed" {
			replacing = append(replacing, in.InstanceID)
		}
	}
	if len(leaving) > 0 {
		reason, msg := ProvisioningReason, fmt.Sprintf("waiting for %d instances to be deleted", len(leaving))
		if len(replacing) > 0 {
			reason, msg = VMFailedReason, fmt.Sprintf("replacing failed instance %s: %s", strings.Join(replacing, ","), msg)
		}
		setReady(amp, metav1.ConditionFalse, reason, msg)
		return &ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	members := make([]poolMember, 0, len(live))
	outdated := 0
	var failedWaiting []string
	for _, in := range live {
		pm := machines[in.InstanceID]
		m := poolMember{ID: in.InstanceID, Current: in.Current(spec), Ready: instanceReady(in, pm), Marked: marked(pm)}
		if in.ProvisioningState == "Failed" && (pm == nil || !ptr.Deref(pm.Status.Initialization.Provisioned, false)) {
			// Only an instance that never provisioned: one that ran and
			// then went Failed (an extension, a model update) may still
			// serve as a node, and all of a pool's instances can fail that
			// way at once; it is kept and reported, as a standalone VM
			// that ran and went Failed is watched, not rewritten
			// (vmFailed). An instance is deleted through its object: one
			// without an object yet gets it below, and its delay starts
			// then.
			if m.Failed = pm != nil && time.Since(pm.CreationTimestamp.Time) >= r.failedReplaceDelay(); !m.Failed {
				failedWaiting = append(failedWaiting, in.InstanceID)
			}
		}
		if !m.Current {
			outdated++
		}
		members = append(members, m)
	}
	plan := rolloutPlan(amp.Spec.Strategy.MaxSurge, amp.Spec.Strategy.MaxUnavailable, replicas)
	chosen, desired := selectToDelete(members, plan)
	waitReason, waitMsg := rolloutWaiting(members, machines, plan, len(chosen))
	if len(failedWaiting) > 0 {
		// The message does not count the time down: it would be written
		// again at every reconcile.
		waitReason, waitMsg = VMFailedReason, fmt.Sprintf("instance %s is Failed in Azure: the pool replaces it %s after it first listed it (a pool whose new instances keep failing, for want of capacity for its size, say, is retried at that pace)",
			strings.Join(failedWaiting, ","), r.failedReplaceDelay())
	}
	var victims []scalesets.Instance
	for _, id := range chosen {
		for _, in := range live {
			// An instance is deleted through its object: one chosen
			// before it has one (an instance the scale set made since
			// the last reconcile, such as one a capacity written from
			// a read that a deletion outdated brings back) gets it below
			// and goes at the next reconcile. Chosen and skipped every
			// time, it would hold the pool above its replicas forever.
			if in.InstanceID == id && machines[id] != nil {
				victims = append(victims, in)
			}
		}
	}
	for _, v := range victims {
		if err := r.deleteInstanceMachine(ctx, machines[v.InstanceID]); err != nil {
			return &ctrl.Result{}, err
		}
	}
	if len(victims) > 0 {
		// The scale set is written only once these deletions are done:
		// its capacity, read before them, is already out of date.
		reason, msg := ProvisioningReason, fmt.Sprintf("deleting %d instances", len(victims))
		var failed []string
		for _, v := range victims {
			if v.ProvisioningState == "Failed" {
				failed = append(failed, v.InstanceID)
			}
		}
		if len(failed) > 0 {
			log.FromContext(ctx).Info("replacing instances Azure reports Failed", "instances", failed)
			reason, msg = VMFailedReason, fmt.Sprintf("replacing failed instance %s", strings.Join(failed, ","))
			if others := len(victims) - len(failed); others > 0 {
				msg += fmt.Sprintf("; deleting %d other instances", others)
			}
		}
		setReady(amp, metav1.ConditionFalse, reason, msg)
		return &ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	pc.instances, pc.machines, pc.replicas, pc.outdated, pc.desired = instances, machines, replicas, outdated, desired
	pc.waitReason, pc.waitMsg = waitReason, waitMsg
	return nil, nil
}

// writeScaleSet writes the scale set's model and capacity and grants its
// identity its role.
func (r *AzureMachinePoolReconciler) writeScaleSet(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, cur, n := pc.amp, pc.cur, pc.names
	t := &amp.Spec.Template
	spec := &pc.spec
	// At least the capacity wanted: the service keeps a higher one Azure
	// has, as read for the write, never as pc.cur has it. pc.cur was read
	// before the instances were listed: an instance deleted since (a
	// chosen one, its object gone) has lowered Azure's capacity, and that
	// capacity written back makes a new VM in its place.
	spec.Capacity = pc.desired
	s := step{"scalesets", amp.Name}
	tok := token(amp.Status.LongRunningOperationStates, s, "PUT")
	// A write changes the instances listed above: the next reconcile
	// lists them again, so that each lists them once. Whether there was
	// one is the service's to say, from its own read: pc.cur may be out
	// of date, and the pool would report instances its write outdated.
	next, wrote, done, err := pc.svc.ScaleSets.Write(ctx, *spec, tok)
	record(&amp.Status.LongRunningOperationStates, s, n.rg, "PUT", next)
	if err != nil {
		return stop(r.azureError(amp, "scale set", err))
	}
	if !done || wrote {
		setReady(amp, metav1.ConditionFalse, ProvisioningReason, "updating the scale set")
		return &ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
	}
	// The scale set has the spec's tags (they are part of its model).
	setLastAppliedTags(amp, mergeMaps(pc.ac.Spec.AdditionalTags, amp.Spec.AdditionalTags))
	amp.Spec.ProviderID = "azure:///subscriptions/" + pc.ac.Spec.SubscriptionID + "/resourceGroups/" + n.rg + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + amp.Name
	if t.Identity == infrav1.VMIdentitySystemAssigned {
		g, err := grantRole(ctx, pc.svc, &amp.Status.CreatedResources, t, pc.ac.Spec.SubscriptionID, n.rg, scalesets.PrincipalID(cur), r.RoleAssignmentScopes, groupOwner(pc.owner, pc.ac))
		if err != nil {
			return stop(r.azureError(amp, "role assignment", err))
		}
		if !g.done {
			setReady(amp, metav1.ConditionFalse, g.reason, g.msg)
			return &ctrl.Result{RequeueAfter: g.after}, nil
		}
	}
	return nil, nil
}

// reconcileInstanceMachines keeps one AzureMachinePoolMachine per instance,
// so Cluster API can track each as a Machine, and reports the pool.
func (r *AzureMachinePoolReconciler) reconcileInstanceMachines(ctx context.Context, pc *poolContext) (*ctrl.Result, error) {
	amp, spec, instances, machines, replicas := pc.amp, pc.spec, pc.instances, pc.machines, pc.replicas
	var ids []string
	settled := int64(len(instances)) == replicas
	for _, in := range instances {
		ids = append(ids, providerid.FromARMID(in.ID))
		settled = settled && in.Current(spec) && in.ProvisioningState == "Succeeded"
		if machines[in.InstanceID] == nil {
			if err := r.createInstanceMachine(ctx, pc, in); err != nil {
				return &ctrl.Result{}, err
			}
		} else if err := r.yieldController(ctx, amp, machines[in.InstanceID]); err != nil {
			return &ctrl.Result{}, err
		} else if err := r.rewriteProviderID(ctx, machines[in.InstanceID], providerid.FromARMID(in.ID)); err != nil {
			return &ctrl.Result{}, err
		}
	}
	amp.Spec.ProviderIDList = ids
	amp.Status.Replicas = int32(len(instances))
	amp.Status.Initialization.Provisioned = ptr.To(true)
	amp.Status.Ready = true
	if pc.waitReason != "" {
		setReady(amp, metav1.ConditionFalse, pc.waitReason, pc.waitMsg)
		return &ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	if !settled {
		setReady(amp, metav1.ConditionFalse, ProvisioningReason, fmt.Sprintf("%d instances, %d wanted, %d to replace", len(instances), replicas, pc.outdated))
		return &ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	setReady(amp, metav1.ConditionTrue, ProvisionedReason, "")
	return nil, nil
}

// failedReplaceDelay is how long a pool keeps an instance Azure reports
// Failed before it deletes it for a new one, counted from the instance's
// object, which the pool makes when it first lists the instance (after the
// scale-set write that made it is done, so at about the time Azure failed
// it: only an instance that never provisioned is replaced). CAPZ deletes a Failed instance at its pool's next reconcile, with no
// pacing (SelectMachinesToDelete, CAPZ 128493dd): a pool whose every new
// instance fails (AllocationFailed for its size or zone, a broken image)
// would delete and recreate instances as fast as Azure fails them, with a
// requeue of a few seconds in between. Six requeues (30 s by default) is
// the pace at which a standalone machine's failed creation is sent again
// (vmFailed): so such a pool makes at most one new instance per failing
// slot every six requeues plus Azure's deletion and creation, and an
// instance Azure reports Failed that then finishes (OSProvisioningTimedOut:
// "The VM may still finish provisioning successfully") has that long to be
// Succeeded and kept.
func (r *AzureMachinePoolReconciler) failedReplaceDelay() time.Duration {
	return 6 * r.Requeue
}

// rolloutPlan resolves maxSurge (rounded up) and maxUnavailable (rounded
// down) against the replicas. When both come to zero, which the webhook
// refuses as numbers but percentages reach by rounding (maxSurge 0%,
// maxUnavailable 25% of 3), nothing could ever be replaced and the rollout
// would stall: one instance may then be unavailable, as Cluster API
// resolves a MachineDeployment's (core/reconcilers/machinedeployment/
// mdutil/util.go ResolveFenceposts, cluster-api v1.14.2).
func rolloutPlan(maxSurge, maxUnavailable *intstr.IntOrString, replicas int64) poolRollout {
	p := poolRollout{Replicas: replicas, Surge: int64(scaled(maxSurge, replicas, true)), Unavailable: int64(scaled(maxUnavailable, replicas, false))}
	if p.Surge == 0 && p.Unavailable == 0 {
		p.Unavailable = 1
	}
	return p
}

// scaled turns maxSurge / maxUnavailable into a count.
func scaled(v *intstr.IntOrString, total int64, roundUp bool) int {
	if v == nil {
		if roundUp {
			return 1
		}
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(total), roundUp)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func marked(m *infrav1.AzureMachinePoolMachine) bool {
	if m == nil {
		return false
	}
	_, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]
	return ok
}

// poolMachines maps instance IDs to the pool's AzureMachinePoolMachines.
func (r *AzureMachinePoolReconciler) poolMachines(ctx context.Context, amp *infrav1.AzureMachinePool) (map[string]*infrav1.AzureMachinePoolMachine, error) {
	list := &infrav1.AzureMachinePoolMachineList{}
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	if err := reader.List(ctx, list, client.InNamespace(amp.Namespace), client.MatchingLabels{infrav1.MachinePoolNameLabel: amp.Name}); err != nil {
		return nil, err
	}
	out := map[string]*infrav1.AzureMachinePoolMachine{}
	for i := range list.Items {
		out[list.Items[i].Spec.InstanceID] = &list.Items[i]
	}
	return out, nil
}

func (r *AzureMachinePoolReconciler) createInstanceMachine(ctx context.Context, pc *poolContext, in scalesets.Instance) error {
	amp := pc.amp
	m := &infrav1.AzureMachinePoolMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: amp.Name + "-" + in.InstanceID, Namespace: amp.Namespace,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: pc.cluster.Name, infrav1.MachinePoolNameLabel: amp.Name,
				// As Cluster API's MachinePool selects its instances'
				// objects: a name longer than a label value allows is
				// hashed (core/reconcilers/machinepool/
				// machinepool_controller_phases.go, cluster-api v1.14.2).
				clusterv1.MachinePoolNameLabel: format.MustFormatValue(pc.mp.Name),
			},
			// Born with its finalizer: the instance exists already, and a
			// delete before the object's first reconcile must still
			// delete it.
			Finalizers: []string{infrav1.MachinePoolMachineFinalizer},
		},
		Spec: infrav1.AzureMachinePoolMachineSpec{ProviderID: providerid.FromARMID(in.ID), InstanceID: in.InstanceID},
	}
	// Owned by the pool but not controlled by it: Cluster API's Machine
	// controller makes the Machine it creates for the instance the
	// controller of the instance's infrastructure machine, and refuses one
	// that another controller holds ("already owned by another ...
	// controller"), leaving the pool without nodes. CAPZ's AzureMachinePool
	// gives the same owner reference (azure/scope/machinepool.go
	// createMachine, CAPZ 69ec3a40).
	if err := controllerutil.SetOwnerReference(amp, m, r.Client.Scheme(), controllerutil.WithBlockOwnerDeletion(true)); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, m); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// yieldController leaves the control of an instance's machine, made by an
// earlier winkube as the pool's controlled object, to the Machine Cluster
// API makes for it.
func (r *AzureMachinePoolReconciler) yieldController(ctx context.Context, amp *infrav1.AzureMachinePool, m *infrav1.AzureMachinePoolMachine) error {
	refs := append([]metav1.OwnerReference(nil), m.OwnerReferences...)
	changed := false
	for i := range refs {
		if refs[i].UID == amp.UID && ptr.Deref(refs[i].Controller, false) {
			refs[i].Controller = nil
			changed = true
		}
	}
	if !changed {
		return nil
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	m.OwnerReferences = refs
	return client.IgnoreNotFound(r.Client.Patch(ctx, m, patch))
}

// rewriteProviderID gives a pool machine written before winkube lower-cased
// the resource group the provider ID its node has, so that Cluster API
// finds the node; the webhook allows this change alone.
func (r *AzureMachinePoolReconciler) rewriteProviderID(ctx context.Context, m *infrav1.AzureMachinePoolMachine, want string) error {
	if m.Spec.ProviderID == want || !strings.EqualFold(m.Spec.ProviderID, want) {
		return nil
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	m.Spec.ProviderID = want
	return client.IgnoreNotFound(r.Client.Patch(ctx, m, patch))
}

// deleteInstanceMachine removes an instance: through its Machine when
// Cluster API made one (so the node is drained first), else directly.
func (r *AzureMachinePoolReconciler) deleteInstanceMachine(ctx context.Context, m *infrav1.AzureMachinePoolMachine) error {
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	return deleteThroughMachine(ctx, r.Client, reader, m)
}

// deleteThroughMachine deletes an instance's object through the Machine
// Cluster API made for it, else directly: an object deleted under its
// Machine leaves that Machine failed, and nothing replaces it. CAPZ deletes
// a pool's machines so, those of vanished instances included
// (azure/scope/machinepool.go DeleteMachine, CAPZ 69ec3a40).
func deleteThroughMachine(ctx context.Context, c client.Client, reader client.Reader, m *infrav1.AzureMachinePoolMachine) error {
	if m == nil || !m.DeletionTimestamp.IsZero() {
		return nil
	}
	machine, err := instanceMachine(ctx, reader, m)
	if err != nil {
		return err
	}
	if machine != nil {
		return client.IgnoreNotFound(c.Delete(ctx, machine))
	}
	return client.IgnoreNotFound(c.Delete(ctx, m))
}

// instanceMachine is the Machine Cluster API made for an instance's object,
// nil when there is none. The object names its Machine (a controller
// reference) only some time after the Machine exists: Cluster API's
// MachinePool creates the Machine under the object's name with the object
// as its infrastructureRef, and its Machine controller writes the reference
// at a later reconcile (cluster-api v1.14.2,
// core/reconcilers/machinepool/machinepool_controller_phases.go
// computeDesiredMachine; core/reconcilers/machine/machine_controller_phases.go
// ensureExternalOwnershipAndWatch), which may never come once the Cluster is
// being deleted. A Machine found by its reference alone is the instance's
// all the same: an object deleted without it leaves it without
// infrastructure, and, where no garbage collector runs (winkube up), the
// Cluster's deletion waits for it forever. CAPZ leaves such an object to
// the garbage collector (azure/scope/machinepool.go DeleteMachine, CAPZ
// b81d0c74).
func instanceMachine(ctx context.Context, reader client.Reader, m *infrav1.AzureMachinePoolMachine) (*clusterv1.Machine, error) {
	for _, ref := range m.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || ref.Kind != "Machine" || gv.Group != clusterv1.GroupVersion.Group {
			continue
		}
		machine := &clusterv1.Machine{}
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, machine); {
		case err == nil:
			return machine, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading Machine %s of %s: %w", ref.Name, m.Name, err)
		}
	}
	machine := &clusterv1.Machine{}
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, machine); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Machine %s: %w", m.Name, err)
	}
	ref := machine.Spec.InfrastructureRef
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != "AzureMachinePoolMachine" || ref.Name != m.Name {
		return nil, nil
	}
	return machine, nil
}

func (r *AzureMachinePoolReconciler) azureError(amp *infrav1.AzureMachinePool, what string, err error) (ctrl.Result, error) {
	reportAzureError(amp, what, err)
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

// poolRole tags a scale set with the pool it belongs to.
func poolRole(amp *infrav1.AzureMachinePool) string {
	return tags.ObjectRole("machinepool", amp.Namespace, amp.Name)
}

// reconcileDelete deletes the scale set the pool recorded (while it still
// carries the pool's role tag), then the pool's instance objects.
func (r *AzureMachinePoolReconciler) reconcileDelete(ctx context.Context, pc *poolContext) (ctrl.Result, error) {
	amp := pc.amp
	setReady(amp, metav1.ConditionFalse, DeletingReason, "deleting the scale set")
	if ids := amp.Status.CreatedResources; len(ids) > 0 {
		sub, err := subscriptionOf(ids)
		if err != nil {
			return ctrl.Result{}, blocked(amp, "the recorded resources", err)
		}
		svc, err := r.Identities.ServicesFor(ctx, amp, sub)
		if err != nil {
			return ctrl.Result{}, blocked(amp, "the recorded resources (Azure credentials)", err)
		}
		dropForeignTokens(amp, svc)
		owner, err := ownerOf(ctx, r.Client, amp.Labels[clusterv1.ClusterNameLabel], amp.Namespace)
		if err != nil {
			return ctrl.Result{}, readBlocked(amp, true, "the AzureClusters", err)
		}
		p := &proof{owner: owner, role: poolRole(amp), kinds: []string{"virtualmachinescalesets", "roleassignments"}}
		var actions []action
		for _, id := range sortForDeletion(ids) {
			actions = append(actions, action{stepOf(id), func(tok string) (string, bool, error) {
				return deleteProven(ctx, svc, p, &amp.Status.CreatedResources, id, tok, func(err error) {
					log.FromContext(ctx).Info("forgetting a recorded resource", "reason", err.Error())
				})
			}})
		}
		pending, failed, err := runActions(&amp.Status.LongRunningOperationStates, "", "DELETE", actions)
		if err != nil {
			return ctrl.Result{}, blocked(amp, failed.service+" "+failed.name, err)
		}
		if pending != nil {
			setReady(amp, metav1.ConditionFalse, DeletingReason, fmt.Sprintf("deleting %s %s", pending.service, pending.name))
			return ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
		}
	}
	machines, err := r.poolMachines(ctx, amp)
	if err != nil {
		return ctrl.Result{}, readBlocked(amp, true, "the pool's AzureMachinePoolMachines", err)
	}
	// Through their Machines, as CAPZ does (azure/scope/machinepool.go
	// DeleteMachine, 69ec3a40): a Machine whose infrastructure machine
	// went first is left failed, and nothing else deletes it where no
	// garbage collector runs for the MachinePool's Machines.
	for _, m := range machines {
		if err := r.deleteInstanceMachine(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(machines) > 0 {
		setReady(amp, metav1.ConditionFalse, DeletingReason, fmt.Sprintf("waiting for %d AzureMachinePoolMachines to go", len(machines)))
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	controllerutil.RemoveFinalizer(amp, infrav1.MachinePoolFinalizer)
	return ctrl.Result{}, nil
}
