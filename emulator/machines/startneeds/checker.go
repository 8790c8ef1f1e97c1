package startneeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/registry"
)

// Node is what the checker needs of the node a container starts on.
type Node struct {
	OS string // "linux" or "windows"
	// ReadFile reads a file of the node's own filesystem, in the node's
	// notation (/etc/kubernetes/azure.json, c:/k/azure.json).
	ReadFile func(path string) ([]byte, error)
}

// Failure is a container that cannot start. Reason is what the kubelet
// reports (CreateContainerConfigError before the process runs,
// CrashLoopBackOff when the process exits); Message what is logged.
type Failure struct {
	Component string
	Reason    string
	// Missing names the piece that is missing.
	Missing string
	Message string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// Checker checks containers against the catalog, asking the API server
// (the cluster the node belongs to) about permissions, CRDs and ConfigMaps.
type Checker struct {
	// Client acts as an administrator would: it reads ConfigMaps and
	// discovery, and creates SubjectAccessReviews.
	Client     kubernetes.Interface
	Components []Component
	// Grants, when set, remembers the permissions the API server granted,
	// shared by the checkers of one cluster's nodes.
	Grants *Grants
	// read is what the check under way has read; nil outside Check.
	read *reads
}

// reads are the ConfigMaps and API groups one check has read. A
// component's needs name the same ones again and again (calico-node:
// fifteen kinds of one CRD group, and its environment six keys of
// calico-config), and every check of a container start read each from
// the API server again: discovery's JSON decoded fifteen times. One check
// now reads each once; the next check (the next start, a recheck) reads
// them again, so a CRD installed or a ConfigMap fixed meanwhile is seen
// as before.
type reads struct {
	configMaps map[string]configMapRead
	groups     map[string]groupRead
}

type configMapRead struct {
	cm  *corev1.ConfigMap
	err error
}

type groupRead struct {
	list *metav1.APIResourceList
	err  error
}

// configMap reads a ConfigMap once per check.
func (c *Checker) configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	key := ns + "/" + name
	if c.read != nil {
		if r, ok := c.read.configMaps[key]; ok {
			return r.cm, r.err
		}
	}
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if c.read != nil {
		c.read.configMaps[key] = configMapRead{cm, err}
	}
	return cm, err
}

// groupResources reads an API group version's discovery once per check.
func (c *Checker) groupResources(gv string) (*metav1.APIResourceList, error) {
	if c.read != nil {
		if r, ok := c.read.groups[gv]; ok {
			return r.list, r.err
		}
	}
	list, err := c.Client.Discovery().ServerResourcesForGroupVersion(gv)
	if c.read != nil {
		c.read.groups[gv] = groupRead{list, err}
	}
	return list, err
}

// Grants remembers for a while the permissions the API server granted:
// the nodes of a cluster start the same components with the same service
// accounts and ask the same questions, hundreds of times in a large
// cluster. A denial is never remembered, so a component whose RBAC is
// fixed starts at its next try; a grant withdrawn is seen within TTL.
type Grants struct {
	TTL time.Duration
	mu  sync.Mutex
	at  map[string]time.Time
}

func (g *Grants) granted(spec authorizationv1.SubjectAccessReviewSpec) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.at[g.key(spec)]
	return ok && time.Since(t) < g.TTL
}

func (g *Grants) grant(spec authorizationv1.SubjectAccessReviewSpec) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at == nil {
		g.at = map[string]time.Time{}
	}
	g.at[g.key(spec)] = time.Now()
}

// key is who asks for what.
func (g *Grants) key(spec authorizationv1.SubjectAccessReviewSpec) string {
	k := spec.User + "|" + strings.Join(spec.Groups, ",")
	if a := spec.ResourceAttributes; a != nil {
		k += "|" + strings.Join([]string{a.Verb, a.Group, a.Resource, a.Subresource, a.Namespace, a.Name}, "|")
	}
	return k
}

// New returns a checker of the upstream catalog.
func New(c kubernetes.Interface) *Checker { return &Checker{Client: c, Components: Catalog()} }

// Find returns the component a container of pod on an OS is, if any.
func (c *Checker) Find(os string, container corev1.Container) *Component {
	repo := registry.Repository(container.Image)
	for i := range c.Components {
		comp := &c.Components[i]
		if comp.OS != "" && comp.OS != os {
			continue
		}
		if !contains(comp.Images, repo) {
			continue
		}
		if len(comp.Containers) > 0 && !contains(comp.Containers, container.Name) {
			continue
		}
		if !hasArgs(container, comp.WithArgs, true) || !hasArgs(container, comp.WithoutArgs, false) {
			continue
		}
		return comp
	}
	return nil
}

// hasArgs says whether every flag ("--flag" or "--flag=value") is on the
// container's command line (present true) or none is (present false).
func hasArgs(container corev1.Container, flags []string, present bool) bool {
	for _, f := range flags {
		flag, want, withValue := strings.Cut(f, "=")
		v, ok := arg(container, flag)
		if ok && withValue {
			ok = v == want
		}
		if ok != present {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Effect returns the effect of a component among a pod's containers on an
// OS, or "".
func (c *Checker) Effect(os string, pod *corev1.Pod) string {
	for _, ct := range pod.Spec.Containers {
		if comp := c.Find(os, ct); comp != nil && comp.Effect != "" {
			return comp.Effect
		}
	}
	return ""
}

// HasEffect says whether an image is one of a component with effect.
func (c *Checker) HasEffect(os, image, effect string) bool {
	comp := c.Find(os, corev1.Container{Image: image})
	return comp != nil && comp.Effect == effect
}

// Check says whether container can start on node: first what the kubelet
// itself needs to create it (ConfigMaps its environment refers to), then
// what its component needs. nil means it starts; an error is a failure to
// ask (the API server unreachable), to be retried.
func (c *Checker) Check(ctx context.Context, node Node, pod *corev1.Pod, container corev1.Container) (*Failure, error) {
	// A copy for this check: the checker is shared by a cluster's nodes.
	one := *c
	one.read = &reads{configMaps: map[string]configMapRead{}, groups: map[string]groupRead{}}
	c = &one
	if f, err := c.kubeletRefs(ctx, pod, container); f != nil || err != nil {
		return f, err
	}
	comp := c.Find(node.OS, container)
	if comp == nil {
		return nil, nil
	}
	for _, n := range comp.Needs {
		if n.IfArg != "" && !hasArgs(container, []string{n.IfArg}, true) {
			continue
		}
		missing, detail, err := c.check(ctx, node, pod, container, n)
		if err != nil {
			return nil, err
		}
		if missing == "" {
			continue
		}
		return &Failure{Component: comp.Name, Reason: "CrashLoopBackOff", Missing: missing, Message: fmt.Sprintf(n.Log, detail)}, nil
	}
	return nil, nil
}

// kubeletRefs is the kubelet's own check before it creates a container:
// every ConfigMap its environment names must exist, with the key.
func (c *Checker) kubeletRefs(ctx context.Context, pod *corev1.Pod, container corev1.Container) (*Failure, error) {
	fail := func(name, msg string) *Failure {
		return &Failure{Reason: "CreateContainerConfigError", Missing: "ConfigMap " + name, Message: msg}
	}
	for _, ef := range container.EnvFrom {
		if ef.ConfigMapRef == nil || (ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional) {
			continue
		}
		_, err := c.configMap(ctx, pod.Namespace, ef.ConfigMapRef.Name)
		if apierrors.IsNotFound(err) {
			return fail(ef.ConfigMapRef.Name, fmt.Sprintf("configmap %q not found", ef.ConfigMapRef.Name)), nil
		}
		if err != nil {
			return nil, err
		}
	}
	for _, e := range container.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref.Optional != nil && *ref.Optional {
			continue
		}
		cm, err := c.configMap(ctx, pod.Namespace, ref.Name)
		if apierrors.IsNotFound(err) {
			return fail(ref.Name, fmt.Sprintf("configmap %q not found", ref.Name)), nil
		}
		if err != nil {
			return nil, err
		}
		if _, ok := cm.Data[ref.Key]; !ok {
			return fail(ref.Name, fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)), nil
		}
	}
	return nil, nil
}

func hostProcess(pod *corev1.Pod) bool {
	sc := pod.Spec.SecurityContext
	if sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil {
		return *sc.WindowsOptions.HostProcess
	}
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.SecurityContext == nil || c.SecurityContext.WindowsOptions == nil || c.SecurityContext.WindowsOptions.HostProcess == nil || !*c.SecurityContext.WindowsOptions.HostProcess {
			return false
		}
	}
	return len(pod.Spec.Containers) > 0
}

// envValue finds a variable the container sets; ok is false when it does
// not. A value from a field or a ConfigMap counts as set.
func (c *Checker) envValue(ctx context.Context, pod *corev1.Pod, container corev1.Container, name string) (string, bool, error) {
	for _, e := range container.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil {
			return e.Value, true, nil
		}
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			cm, err := c.configMap(ctx, pod.Namespace, ref.Name)
			if err != nil {
				return "", false, ignoreNotFound(err)
			}
			v, ok := cm.Data[ref.Key]
			return v, ok, nil
		}
		return "", true, nil
	}
	for _, ef := range container.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm, err := c.configMap(ctx, pod.Namespace, ef.ConfigMapRef.Name)
		if err != nil {
			if err := ignoreNotFound(err); err != nil {
				return "", false, err
			}
			continue
		}
		if v, ok := cm.Data[strings.TrimPrefix(name, ef.Prefix)]; ok && strings.HasPrefix(name, ef.Prefix) {
			return v, true, nil
		}
	}
	return "", false, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// arg finds a flag on the container's command line: "--flag=value" or
// "--flag value"; ok is false when it is absent.
func arg(container corev1.Container, flag string) (string, bool) {
	words := append(append([]string(nil), container.Command...), container.Args...)
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, flag+"="); ok {
			return v, true
		}
		if w == flag {
			if i+1 < len(words) {
				return words[i+1], true
			}
			return "", true
		}
	}
	return "", false
}

// check returns what is missing ("" when the need is met) and the detail
// the component's log line carries.
func (c *Checker) check(ctx context.Context, node Node, pod *corev1.Pod, container corev1.Container, n Need) (string, string, error) {
	switch {
	case n.HostNetwork:
		if !pod.Spec.HostNetwork {
			return "hostNetwork", "the pod is not in the host network (set hostNetwork: true)", nil
		}
	case n.HostProcess:
		if !hostProcess(pod) || !pod.Spec.HostNetwork {
			return "HostProcess", "the pod is not a HostProcess pod (set securityContext.windowsOptions.hostProcess: true and hostNetwork: true)", nil
		}
	case n.Env != "":
		v, ok, err := c.envValue(ctx, pod, container, n.Env)
		if err != nil {
			return "", "", err
		}
		if !ok || (n.EnvValue == "" && v == "" && !fromField(container, n.Env)) {
			return "env " + n.Env, fmt.Sprintf("environment variable %s is not set", n.Env), nil
		}
		if n.EnvValue != "" && v != n.EnvValue {
			return "env " + n.Env, fmt.Sprintf("is %q, not %q", v, n.EnvValue), nil
		}
	case n.Arg != "":
		flag, want, _ := strings.Cut(n.Arg, "=")
		v, ok := arg(container, flag)
		if !ok || (want != "" && v != want) {
			return "arg " + n.Arg, fmt.Sprintf("the command line lacks %s", n.Arg), nil
		}
	case n.Mount != nil:
		return c.checkMount(pod, container, *n.Mount)
	case n.Permission != nil:
		return c.checkPermission(ctx, pod, *n.Permission)
	case n.CRD != "":
		return c.checkCRD(ctx, n.CRD)
	case n.ConfigMap != nil:
		ns := n.ConfigMap.Namespace
		if ns == "" {
			ns = pod.Namespace
		}
		cm, err := c.configMap(ctx, ns, n.ConfigMap.Name)
		if apierrors.IsNotFound(err) {
			return "ConfigMap " + n.ConfigMap.Name, fmt.Sprintf("configmaps %q not found", n.ConfigMap.Name), nil
		}
		if err != nil {
			return "", "", err
		}
		for _, k := range n.ConfigMap.Keys {
			if _, ok := cm.Data[k]; !ok {
				return "ConfigMap " + n.ConfigMap.Name + " key " + k, fmt.Sprintf("ConfigMap %s/%s has no key %s", ns, n.ConfigMap.Name, k), nil
			}
		}
	case n.CloudConfig != nil:
		return c.findCloudConfig(ctx, node, pod, container, *n.CloudConfig)
	}
	return "", "", nil
}

func fromField(container corev1.Container, name string) bool {
	for _, e := range container.Env {
		if e.Name == name && e.ValueFrom != nil {
			return true
		}
	}
	return false
}

func (c *Checker) checkMount(pod *corev1.Pod, container corev1.Container, m Mount) (string, string, error) {
	what := "mount " + m.MountPath
	if m.HostPath != "" {
		what = "hostPath " + m.HostPath + " at " + m.MountPath
	}
	for _, vm := range container.VolumeMounts {
		if strings.TrimSuffix(vm.MountPath, "/") != strings.TrimSuffix(m.MountPath, "/") {
			continue
		}
		if m.HostPath == "" {
			return "", "", nil
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.HostPath != nil && strings.TrimSuffix(v.HostPath.Path, "/") == strings.TrimSuffix(m.HostPath, "/") {
				return "", "", nil
			}
		}
		return what, fmt.Sprintf("%s is not the host's %s (volume mount %s is no hostPath volume of %s)", m.MountPath, m.HostPath, vm.Name, m.HostPath), nil
	}
	detail := fmt.Sprintf("open %s: no such file or directory (no volume mounted at %s", m.MountPath, m.MountPath)
	if m.HostPath != "" {
		detail += " from hostPath " + m.HostPath
	}
	return what, detail + ")", nil
}

func (c *Checker) checkPermission(ctx context.Context, pod *corev1.Pod, p Permission) (string, string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ns := p.Namespace
	if ns == "$pod" {
		ns = pod.Namespace
	}
	user := "system:serviceaccount:" + pod.Namespace + ":" + sa
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + pod.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Namespace: ns, Name: p.Name,
		},
	}}
	if c.Grants.granted(sar.Spec) {
		return "", "", nil
	}
	res, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("asking the API server whether %s may %s %s: %w", user, p.Verb, p.Resource, err)
	}
	if res.Status.Allowed {
		c.Grants.grant(sar.Spec)
		return "", "", nil
	}
	resource := p.Resource
	if p.Subresource != "" {
		resource += "/" + p.Subresource
	}
	scope := "at the cluster scope"
	if ns != "" {
		scope = fmt.Sprintf("in the namespace %q", ns)
	}
	name := ""
	if p.Name != "" {
		name = fmt.Sprintf(" %q", p.Name)
	}
	// The API server's Forbidden message, as the component logs it.
	msg := fmt.Sprintf("%s%s is forbidden: User %q cannot %s resource %q in API group %q %s", p.Resource, name, user, p.Verb, resource, p.Group, scope)
	return "permission " + p.Verb + " " + groupResource(p.Group, resource), msg, nil
}

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

func (c *Checker) checkCRD(ctx context.Context, crd string) (string, string, error) {
	plural, group, _ := strings.Cut(crd, ".")
	list, err := c.groupResources(group + "/v1")
	if err != nil && !apierrors.IsNotFound(err) {
		return "", "", err
	}
	if list != nil {
		for _, r := range list.APIResources {
			if r.Name == plural {
				return "", "", nil
			}
		}
	}
	return "CRD " + crd, "get " + crd, nil
}

// findCloudConfig looks for the cloud config where the component does:
// its Secret first, then the file its environment or Default names, seen
// through its hostPath mount when it reads the node's file that way.
func (c *Checker) findCloudConfig(ctx context.Context, node Node, pod *corev1.Pod, container corev1.Container, cc CloudConfig) (string, string, error) {
	if s := cc.Secret; s != nil {
		name, ns := s.Name, s.Namespace
		if v, ok := arg(container, s.NameArg); ok && s.NameArg != "" && v != "" {
			name = v
		}
		if v, ok := arg(container, s.NamespaceArg); ok && s.NamespaceArg != "" && v != "" {
			ns = v
		}
		secret, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", "", err
		}
		if err == nil {
			if data, ok := secret.Data[s.Key]; ok {
				return c.checkCloudConfigData(fmt.Sprintf("secret %s/%s", ns, name), data, container, cc)
			}
		}
	}
	path := cc.Default
	if cc.PathEnv != "" {
		v, ok, err := c.envValue(ctx, pod, container, cc.PathEnv)
		if err != nil {
			return "", "", err
		}
		if ok && strings.TrimSpace(v) != "" {
			path = v
		}
	}
	if cc.HostDir != "" {
		if missing, _, _ := c.checkMount(pod, container, Mount{MountPath: cc.HostDir, HostPath: cc.HostDir}); missing != "" {
			// The file is on the node, not in the image: without the
			// volume the container has no such file.
			return "cloud config " + path + " (hostPath " + cc.HostDir + ")", fmt.Sprintf("open %s: no such file or directory", path), nil
		}
	}
	cc.Default = path
	return c.checkCloudConfig(node, container, cc)
}

func (c *Checker) checkCloudConfig(node Node, container corev1.Container, cc CloudConfig) (string, string, error) {
	path := cc.Default
	if v, ok := arg(container, cc.PathArg); ok && cc.PathArg != "" && v != "" {
		path = v
	}
	if node.ReadFile == nil {
		return "cloud config " + path, fmt.Sprintf("open %s: no such file or directory", path), nil
	}
	data, err := node.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "cloud config " + path, fmt.Sprintf("open %s: no such file or directory", path), nil
	}
	if err != nil {
		return "cloud config " + path, err.Error(), nil
	}
	return c.checkCloudConfigData(path, data, container, cc)
}

// checkCloudConfigData checks a cloud config's content, read from path (a
// file, or the Secret it came from).
func (c *Checker) checkCloudConfigData(path string, data []byte, container corev1.Container, cc CloudConfig) (string, string, error) {
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "cloud config " + path, fmt.Sprintf("failed to parse the cloud config %s: %v", path, err), nil
	}
	var missing []string
	for _, f := range cc.Fields {
		if v, ok := cfg[f]; !ok || v == "" || v == nil {
			missing = append(missing, f)
		}
	}
	if cc.Credentials && !hasCredential(data, container) {
		// cloud-provider-azure v1.36.5 (pkg/provider/azure.go, commit
		// 9da1599): with no credential a file-only config without
		// useInstanceMetadata fails to initialize; otherwise the process
		// starts without one, its client factory substitutes a zero
		// DefaultAzureCredential (pkg/azclient/factory_gen.go), and the
		// first ARM call dereferences its nil chain.
		imds, _ := cfg["useInstanceMetadata"].(bool)
		if t, _ := cfg["cloudConfigType"].(string); t == "file" && !imds {
			return "azure.json credentials", "useInstanceMetadata must be enabled without Azure credentials", nil
		}
		return "azure.json credentials", fmt.Sprintf("the cloud config %s holds no credential (aadClientSecret, useManagedIdentityExtension, aadClientCertPath or workload identity): the process starts without one and its first ARM call fails with panic: runtime error: invalid memory address or nil pointer dereference", path), nil
	}
	if len(missing) == 0 {
		return "", "", nil
	}
	sort.Strings(missing)
	return "azure.json " + missing[0], fmt.Sprintf("the cloud config %s lacks %s", path, strings.Join(missing, ", ")), nil
}

// hasCredential says whether cloud-provider-azure v1.36.5 finds an ARM
// credential (pkg/azclient/auth.go NewAuthProvider), the container's
// AZURE_* variables winning over the file. A field of the wrong type is
// left empty; the others still count.
func hasCredential(data []byte, c corev1.Container) bool {
	var cfg cloudprovider.AzureConfig
	_ = json.Unmarshal(data, &cfg)
	return cloudprovider.HasCredential(cfg, cloudprovider.AzureEnv(c))
}
