// Package azuredisk does for a workload cluster what the Azure Disk CSI
// driver's controller Deployment (csi-azuredisk-controller) does: its
// csi-provisioner sidecar turns claims into Azure managed disks and
// PersistentVolumes and deletes them again, its csi-attacher sidecar turns
// VolumeAttachments into data disks of the node's VM, and the azuredisk
// container's controller service (CreateVolume, DeleteVolume,
// ControllerPublishVolume, ControllerUnpublishVolume) makes the ARM calls,
// through the real Azure SDK against the emulator. It acts only while such
// a pod runs Ready in kube-system, as nothing else attaches disks on Azure.
// Its node plugin (node.go) finds an attached disk by its LUN, formats it
// the first time and mounts it where the kubelet asks; a disk's contents
// live outside any machine, in the runtime's store of managed disks, so
// what a pod wrote is there again on whichever node the disk is attached
// to next.
//
// Upstream read for it:
// kubernetes-sigs/azuredisk-csi-driver v1.34.5 (fb4981e3),
// kubernetes-csi/external-provisioner v6.3.0 (34c6fc21) with
// sig-storage-lib-external-provisioner v13, kubernetes-csi/external-attacher
// v4.12.0 (f395fb4f), kubernetes-sigs/cloud-provider-azure df3a4049.
package azuredisk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/containerruntime"
)

// DriverName is the CSI driver's name (the chart's --drivername).
const DriverName = "disk.csi.azure.com"

// The roles of the controller pod's containers.
const (
	RoleDriver      = "driver"
	RoleProvisioner = "provisioner"
	RoleAttacher    = "attacher"
)

// ControllerConfig is one workload cluster's disk CSI controller.
type ControllerConfig struct {
	// Client is the workload cluster's admin.
	Client kubernetes.Interface
	// Role says what a container of a kube-system pod is: RoleDriver (the
	// azuredisk plugin), RoleProvisioner (csi-provisioner), RoleAttacher
	// (csi-attacher), or "".
	Role func(c corev1.Container) string
	// ReadNodeFile reads a file on a node's disk: the cloud config the
	// driver reads on the node its pod runs on.
	ReadNodeFile func(node, path string) ([]byte, error)
	// IMDS gives the base URL of the Instance Metadata Service of a node's
	// VM, for a managed identity; "" when there is none.
	IMDS func(node string) string
	// Connect gives the compute RP of a subscription, reached with a
	// credential.
	Connect func(cr cloudprovider.Credentials, subscription string) (*armcompute.ClientFactory, error)
	// PodClient, when set, is the API server as the controller pod's
	// processes reach it: its ServiceAccount's token. What the sidecars
	// and the driver write (PVs, VolumeAttachments and their status,
	// events) and the cloud config Secret the driver reads go through
	// it, so that the chart's RBAC decides, as on a cluster; without it,
	// Client.
	PodClient func(p *corev1.Pod) (kubernetes.Interface, error)
	// Synced, when set, says whether the pod's sidecar of a role has
	// listed what it waits for with the pod's credentials (its
	// informers): until then that sidecar does nothing, and why is the
	// second result.
	Synced func(p *corev1.Pod, role string) (bool, string)
	Log    logr.Logger
}

// Controller is a running disk CSI controller.
type Controller struct {
	cfg    ControllerConfig
	cancel context.CancelFunc
	done   chan struct{}
	queue  workqueue.TypedRateLimitingInterface[string]

	pods, pvcs, pvs, classes, csiNodes, nodes, vas cache.Indexer

	mu sync.Mutex
	// clouds is the cloud config each driver pod read when it started,
	// by pod UID: the process reads it once.
	clouds map[string]*driverCloud
	// warned is the last Warning event per object, so that retries do
	// not pile up identical events.
	warned map[string]string
	// vmLocks serialize the data-disk changes of one VM, as
	// cloud-provider-azure's per-node lock does (a VM PUT carries the
	// whole list).
	vmLocks map[string]*sync.Mutex
}

// driverCloud is what the driver process knows of Azure.
type driverCloud struct {
	config cloudprovider.AzureConfig
	cred   cloudprovider.Credentials
	// api is the API server with the pod's credentials.
	api kubernetes.Interface
	// identity is the provisioner's identity, as external-provisioner
	// makes it when it starts (<time>-<random>-<driver>), and the
	// component its events come from (<driver>_<hostname>_<uuid>).
	identity, component string
}

// StartController runs the controller until Stop.
func StartController(cfg ControllerConfig) *Controller {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{cfg: cfg, cancel: cancel, done: make(chan struct{}),
		clouds: map[string]*driverCloud{}, warned: map[string]string{}, vmLocks: map[string]*sync.Mutex{},
		// external-provisioner and external-attacher retry with
		// exponential back-off; these bounds are short for the local world.
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second))}
	strip := informers.WithTransform(crcache.TransformStripManagedFields())
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, strip)
	pf := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(metav1.NamespaceSystem), strip)
	pi := pf.Core().V1().Pods().Informer()
	_ = pi.AddIndexers(cache.Indexers{driverIndex: func(o any) ([]string, error) {
		if p, ok := o.(*corev1.Pod); ok && c.driverContainer(p) != nil {
			return []string{"true"}, nil
		}
		return nil, nil
	}})
	claimI, pvI := f.Core().V1().PersistentVolumeClaims().Informer(), f.Core().V1().PersistentVolumes().Informer()
	scI, csiI, nodeI, vaI := f.Storage().V1().StorageClasses().Informer(), f.Storage().V1().CSINodes().Informer(),
		f.Core().V1().Nodes().Informer(), f.Storage().V1().VolumeAttachments().Informer()
	c.pods, c.pvcs, c.pvs, c.classes = pi.GetIndexer(), claimI.GetIndexer(), pvI.GetIndexer(), scI.GetIndexer()
	c.csiNodes, c.nodes, c.vas = csiI.GetIndexer(), nodeI.GetIndexer(), vaI.GetIndexer()
	on := func(prefix string) cache.ResourceEventHandlerFuncs {
		h := func(o any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.queue.Add(prefix + k)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }, DeleteFunc: h}
	}
	_, _ = claimI.AddEventHandler(on(claimPrefix))
	_, _ = pvI.AddEventHandler(on(pvPrefix))
	_, _ = vaI.AddEventHandler(on(vaPrefix))
	// A PV whose attachments are gone may lose the attacher's finalizer.
	_, _ = vaI.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if va, ok := o.(*storagev1.VolumeAttachment); ok && va.Spec.Source.PersistentVolumeName != nil {
			c.queue.Add(pvPrefix + *va.Spec.Source.PersistentVolumeName)
		}
	}})
	// What a claim waits for: its node's driver registration, a class.
	all := func(prefix string, idx cache.Indexer) func(any) {
		return func(any) {
			for _, k := range idx.ListKeys() {
				c.queue.Add(prefix + k)
			}
		}
	}
	everything := func(any) {
		all(claimPrefix, c.pvcs)(nil)
		all(pvPrefix, c.pvs)(nil)
		all(vaPrefix, c.vas)(nil)
	}
	_, _ = csiI.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: everything, UpdateFunc: func(_, o any) { everything(o) }})
	_, _ = scI.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all(claimPrefix, c.pvcs), UpdateFunc: func(_, o any) { all(claimPrefix, c.pvcs)(o) }})
	// The driver pod starting, turning Ready or going changes everything.
	_, _ = pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok && c.driverContainer(p) != nil {
				everything(o)
			}
		},
		UpdateFunc: func(_, o any) {
			if p, ok := o.(*corev1.Pod); ok && c.driverContainer(p) != nil {
				everything(o)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				c.mu.Lock()
				delete(c.clouds, string(p.UID))
				c.mu.Unlock()
			}
		},
	})
	f.Start(ctx.Done())
	pf.Start(ctx.Done())
	synced := []cache.InformerSynced{pi.HasSynced, claimI.HasSynced, pvI.HasSynced, scI.HasSynced, csiI.HasSynced, nodeI.HasSynced, vaI.HasSynced}
	var wg sync.WaitGroup
	go func() {
		defer close(c.done)
		go func() { <-ctx.Done(); c.queue.ShutDown() }()
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			return
		}
		// A few workers, as the sidecars run several (--worker-threads):
		// one slow ARM operation does not hold up the others. A key is
		// never worked on twice at once (workqueue).
		for range workers {
			wg.Add(1)
			go func() { defer wg.Done(); c.work(ctx) }()
		}
		wg.Wait()
		f.Shutdown()
		pf.Shutdown()
	}()
	return c
}

const (
	workers     = 4
	driverIndex = "driver"
	claimPrefix = "pvc/"
	pvPrefix    = "pv/"
	vaPrefix    = "va/"
)

func (c *Controller) work(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		var err error
		switch {
		case strings.HasPrefix(key, claimPrefix):
			err = c.syncClaim(ctx, key[len(claimPrefix):])
		case strings.HasPrefix(key, pvPrefix):
			err = c.syncVolume(ctx, key[len(pvPrefix):])
		case strings.HasPrefix(key, vaPrefix):
			err = c.syncAttachment(ctx, key[len(vaPrefix):])
		}
		if err != nil && ctx.Err() == nil {
			c.cfg.Log.V(1).Info("azure disk CSI controller", "key", key, "error", err.Error())
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// Stop stops the controller.
func (c *Controller) Stop() {
	c.cancel()
	<-c.done
}

// driverContainer is the pod's azuredisk container serving the controller
// service: the node plugin runs the same image with --nodeid (the chart's
// csi-azuredisk-node DaemonSets), the controller without.
func (c *Controller) driverContainer(p *corev1.Pod) *corev1.Container {
	if c.cfg.Role == nil || p.Namespace != metav1.NamespaceSystem {
		return nil
	}
	for i, ct := range p.Spec.Containers {
		if c.cfg.Role(ct) != RoleDriver {
			continue
		}
		if _, node := containerruntime.Arg(ct, "--nodeid"); node {
			continue
		}
		return &p.Spec.Containers[i]
	}
	return nil
}

// has says whether the pod runs a container of a role.
func (c *Controller) has(p *corev1.Pod, role string) bool {
	for _, ct := range p.Spec.Containers {
		if c.cfg.Role(ct) == role {
			return true
		}
	}
	return false
}

// activeDriver is the controller pod whose processes act: running and
// Ready in kube-system; of several (the sidecars elect a leader), the
// oldest.
func (c *Controller) activeDriver() *corev1.Pod {
	var best *corev1.Pod
	ps, _ := c.pods.ByIndex(driverIndex, "true")
	for _, o := range ps {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		if best == nil || p.CreationTimestamp.Before(&best.CreationTimestamp) ||
			(p.CreationTimestamp.Equal(&best.CreationTimestamp) && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// Active says whether a controller pod runs Ready in kube-system.
func (c *Controller) Active() bool { return c.activeDriver() != nil }

// acting is the driver's view of Azure when the active pod has a
// container of the role (the sidecar doing that work); nil when none acts.
func (c *Controller) acting(ctx context.Context, role string) (*driverCloud, error) {
	p := c.activeDriver()
	if p == nil || !c.has(p, role) {
		return nil, nil
	}
	if c.cfg.Synced != nil {
		if ok, why := c.cfg.Synced(p, role); !ok {
			return nil, fmt.Errorf("csi-%s in pod %s/%s waits for its informers to sync: %s", role, p.Namespace, p.Name, why)
		}
	}
	return c.cloudOf(ctx, p)
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Where the driver looks for its cloud config (azuredisk-csi-driver v1.34.5
// pkg/azuredisk/azuredisk_option.go flag defaults, pkg/azureconstants).
const (
	defaultSecretName      = "azure-cloud-provider"
	defaultSecretNamespace = "kube-system"
	cloudConfigKey         = "cloud-config"
	credFileEnv            = "AZURE_CREDENTIAL_FILE"
	defaultCredFileLinux   = "/etc/kubernetes/azure.json"
)

// cloudOf reads the cloud config as the driver does when it starts
// (pkg/azureutils/azure_disk_utils.go GetCloudProviderFromClient): the
// secret's cloud-config key, else the file AZURE_CREDENTIAL_FILE names,
// else /etc/kubernetes/azure.json on the pod's node (the chart mounts the
// host's /etc/kubernetes). The controller runs with
// --allow-empty-cloud-config=false, so without either it cannot start.
func (c *Controller) cloudOf(ctx context.Context, p *corev1.Pod) (*driverCloud, error) {
	c.mu.Lock()
	dc := c.clouds[string(p.UID)]
	c.mu.Unlock()
	if dc != nil {
		return dc, nil
	}
	ct := c.driverContainer(p)
	name, ns := defaultSecretName, defaultSecretNamespace
	if v, ok := containerruntime.Arg(*ct, "--cloud-config-secret-name"); ok {
		name = v
	}
	if v, ok := containerruntime.Arg(*ct, "--cloud-config-secret-namespace"); ok {
		ns = v
	}
	api := c.cfg.Client
	if c.cfg.PodClient != nil {
		var err error
		if api, err = c.cfg.PodClient(p); err != nil {
			return nil, err
		}
	}
	var data []byte
	where := ""
	if name != "" && ns != "" {
		if s, err := api.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && len(s.Data[cloudConfigKey]) > 0 {
			data, where = s.Data[cloudConfigKey], "secret "+ns+"/"+name
		}
	}
	if data == nil {
		path := c.envValue(ctx, p, *ct, credFileEnv)
		if path == "" {
			path = defaultCredFileLinux
		}
		if c.cfg.ReadNodeFile == nil {
			return nil, fmt.Errorf("no cloud config provided, error: the file %s on node %s cannot be read here", path, p.Spec.NodeName)
		}
		b, err := c.cfg.ReadNodeFile(p.Spec.NodeName, path)
		if err != nil {
			// The driver's words when neither source gives a config.
			return nil, fmt.Errorf("no cloud config provided, error: %v", err)
		}
		data, where = b, path
	}
	var cfg cloudprovider.AzureConfig
	// cloud-provider-azure's config loader reads YAML, of which JSON is a
	// subset.
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("the cloud config %s of the azuredisk controller on node %s cannot be parsed: %w", where, p.Spec.NodeName, err)
	}
	// The driver normalises the location: lower case, no spaces.
	cfg.Location = strings.ToLower(strings.ReplaceAll(cfg.Location, " ", ""))
	cr, err := cloudprovider.CredentialsFor(cfg, cloudprovider.AzureEnv(*ct), p.Spec.NodeName, where, c.cfg.IMDS)
	if err != nil {
		return nil, err
	}
	// The provisioner's hostname: the node's, as the chart runs the pod
	// with hostNetwork.
	host := p.Name
	if p.Spec.HostNetwork {
		host = p.Spec.NodeName
	}
	dc = &driverCloud{config: cfg, cred: cr, api: api,
		identity:  fmt.Sprintf("%d-%d-%s", time.Now().UnixMilli(), rand.IntN(10000), DriverName),
		component: DriverName + "_" + host + "_" + string(uuid.NewUUID())}
	c.mu.Lock()
	c.clouds[string(p.UID)] = dc
	c.mu.Unlock()
	return dc, nil
}

// envValue is a container variable's value: literal, or from a ConfigMap
// key (the chart takes AZURE_CREDENTIAL_FILE from the optional ConfigMap
// azure-cred-file).
func (c *Controller) envValue(ctx context.Context, p *corev1.Pod, ct corev1.Container, name string) string {
	for _, e := range ct.Env {
		if e.Name != name {
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			return e.Value
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		cm, err := c.cfg.Client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return cm.Data[ref.Key]
	}
	return ""
}

// compute is the compute RP of a subscription with the driver's credential.
func (c *Controller) compute(dc *driverCloud, sub string) (*armcompute.ClientFactory, error) {
	if c.cfg.Connect == nil {
		return nil, fmt.Errorf("no Azure to call: the machine runtime was started without an ARM endpoint")
	}
	if sub == "" {
		sub = dc.config.SubscriptionID
	}
	return c.cfg.Connect(dc.cred, sub)
}

// event records an event on an object, as the sidecars' recorders do; a
// Warning repeating the last one for the object is not recorded again
// (the real recorder would count it).
func (c *Controller) event(ctx context.Context, dc *driverCloud, ref corev1.ObjectReference, typ, reason, msg string) {
	key := ref.Kind + "/" + ref.Namespace + "/" + ref.Name
	c.mu.Lock()
	if typ == corev1.EventTypeWarning && c.warned[key] == reason+msg {
		c.mu.Unlock()
		return
	}
	if typ == corev1.EventTypeWarning {
		c.warned[key] = reason + msg
	} else {
		delete(c.warned, key)
	}
	c.mu.Unlock()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.Now()
	_, err := dc.api.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: ns},
		InvolvedObject: ref, Reason: reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: dc.component},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.cfg.Log.V(1).Info("recording an event", "object", key, "reason", reason, "error", err.Error())
	}
}

// vmLock is the lock of one VM's data disks.
func (c *Controller) vmLock(vmID string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := strings.ToLower(vmID)
	if c.vmLocks[k] == nil {
		c.vmLocks[k] = &sync.Mutex{}
	}
	return c.vmLocks[k]
}
