package startneeds

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/winkube/winkube/internal/poll"
)

// recorder keeps each request as the API server sees it, and may answer
// or rewrite one in place of the server.
type recorder struct {
	rt      http.RoundTripper
	mu      sync.Mutex
	seen    []string
	rewrite func(r *http.Request) (*http.Request, *http.Response)
}

func (c *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.seen = append(c.seen, describeRequest(r))
	rw := c.rewrite
	c.mu.Unlock()
	if rw != nil {
		nr, resp := rw(r)
		if resp != nil {
			return resp, nil
		}
		r = nr
	}
	return c.rt.RoundTrip(r)
}

func (c *recorder) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// describeRequest is what the API server's work and authorization depend
// on: verb, path, query (the watch's jittered timeout and the version it
// starts from left out), the
// content types asked for and the client's name.
func describeRequest(r *http.Request) string {
	q := r.URL.Query()
	for _, k := range []string{"timeoutSeconds", "timeout"} {
		if q.Has(k) {
			q.Set(k, "T")
		}
	}
	if q.Has("resourceVersion") {
		q.Set("resourceVersion", "RV")
	}
	return fmt.Sprintf("%s %s?%s accept=%q content-type=%q agent=%q", r.Method, r.URL.Path, q.Encode(),
		r.Header.Get("Accept"), r.Header.Get("Content-Type"), r.Header.Get("User-Agent"))
}

func recordingConfig(cfg *rest.Config, rec *recorder) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec })
	return c
}

// A session's lists and watches are, request for request, those of
// client-go's metadata client: the API server does the same work and
// checks the same rights, whatever the session decodes of the answers.
func TestSessionRequestsAreTheMetadataClients(t *testing.T) {
	env := apiServer.Env(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watches := []Watch{
		{Version: "v1", Resource: "pods", FieldSelector: "spec.nodeName=n"},
		{Version: "v1", Resource: "nodes", OwnNode: true},
		{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", LabelSelector: "!service.kubernetes.io/headless"},
	}
	var rec recorder
	s, err := StartSession(SessionConfig{Config: recordingConfig(env.Config, &rec), Node: "n", Watches: watches, Sync: Sync{Retry: time.Second, MaxRetry: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	poll.Until(t, time.Minute, func() string {
		if n := len(rec.requests()); n < 2*len(watches) {
			return fmt.Sprintf("the session sent %d requests, want a list and a watch of each of %d resources", n, len(watches))
		}
		return ""
	})
	got := rec.requests()

	var want recorder
	mc, err := metadata.NewForConfig(recordingConfig(env.Config, &want))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range watches {
		opts := metav1.ListOptions{Limit: 500, LabelSelector: w.LabelSelector, FieldSelector: w.FieldSelector}
		if w.OwnNode {
			opts.FieldSelector = "metadata.name=n"
		}
		l, err := mc.Resource(w.gvr()).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		wo := opts
		wo.Limit, wo.ResourceVersion, wo.AllowWatchBookmarks, wo.TimeoutSeconds = 0, l.ResourceVersion, true, ptr(int64(1))
		wi, err := mc.Resource(w.gvr()).Watch(ctx, wo)
		if err != nil {
			t.Fatal(err)
		}
		wi.Stop()
	}
	slices.Sort(got)
	exp := want.requests()
	slices.Sort(exp)
	if !slices.Equal(got, exp) {
		t.Fatalf("the session's requests differ from client-go's metadata client's:\nsession:\n%s\nmetadata client:\n%s",
			strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
}

// A watch that ends with an ERROR event (the server's 410 for a version
// it no longer has) or that the server refuses with 410 Gone leads to a
// new list, as a reflector's does.
func TestSessionListsAgainAfterGone(t *testing.T) {
	env := apiServer.Env(t)
	gone := func(r *http.Request) (*http.Request, *http.Response) {
		body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}`
		return nil, &http.Response{StatusCode: http.StatusGone, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}
	}
	expired := func(r *http.Request) (*http.Request, *http.Response) {
		// What the server streams when the version asked for is older
		// than what it keeps: 200, then one ERROR event with a 410 Status.
		st := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonExpired, Code: http.StatusGone, Message: "too old resource version"}
		body := watchStream(t, []watch.Event{{Type: watch.Error, Object: st}})
		return nil, &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/vnd.kubernetes.protobuf;stream=watch"}},
			Body: io.NopCloser(bytes.NewReader(body)), Request: r}
	}
	for name, answer := range map[string]func(*http.Request) (*http.Request, *http.Response){"an ERROR event": expired, "410 Gone": gone} {
		t.Run(name, func(t *testing.T) { listsAgainAfter(t, env.Config, answer) })
	}
}

func listsAgainAfter(t *testing.T, cfg *rest.Config, answer func(*http.Request) (*http.Request, *http.Response)) {
	var rec recorder
	var once sync.Once
	rec.rewrite = func(r *http.Request) (nr *http.Request, resp *http.Response) {
		nr = r
		if r.URL.Query().Get("watch") == "true" {
			once.Do(func() { nr, resp = answer(r) })
		}
		return nr, resp
	}
	s, err := StartSession(SessionConfig{Config: recordingConfig(cfg, &rec), Node: "n",
		Watches: []Watch{{Version: "v1", Resource: "namespaces"}}, Sync: Sync{Retry: 10 * time.Millisecond, MaxRetry: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	poll.Until(t, time.Minute, func() string {
		var lists int
		for _, r := range rec.requests() {
			if strings.HasPrefix(r, "GET /api/v1/namespaces?") && !strings.Contains(r, "watch=true") {
				lists++
			}
		}
		if lists < 2 {
			return fmt.Sprintf("%d lists of namespaces after the first watch was gone, want a second list:\n%s", lists, strings.Join(rec.requests(), "\n"))
		}
		return ""
	})
}

// pod is the metadata of a scheduled, running pod as a real cluster keeps
// it: the managedFields of its creator, the scheduler and the kubelet.
func pod(i int) *metav1.PartialObjectMetadata {
	ts := metav1.NewTime(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	fields := metav1.NewFieldsV1
	status := `{"f:status":{"f:conditions":{` +
		strings.Repeat(`"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},`, 5) +
		`"k:{\"type\":\"PodScheduled\"}":{".":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.1.2.3\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`
	spec := `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:controller-revision-hash":{},"f:k8s-app":{},"f:pod-template-generation":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b6e0c5d-2f1c-4f7e-9b5e-6d1f4c2a9e11\"}":{}}},"f:spec":{"f:affinity":{".":{},"f:nodeAffinity":{".":{},"f:requiredDuringSchedulingIgnoredDuringExecution":{}}},"f:containers":{"k:{\"name\":\"calico-node\"}":{".":{},"f:env":{".":{},"k:{\"name\":\"DATASTORE_TYPE\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:imagePullPolicy":{},"f:livenessProbe":{},"f:name":{},"f:readinessProbe":{},"f:resources":{},"f:securityContext":{},"f:volumeMounts":{}}},"f:dnsPolicy":{},"f:hostNetwork":{},"f:nodeSelector":{},"f:priorityClassName":{},"f:restartPolicy":{},"f:schedulerName":{},"f:serviceAccount":{},"f:tolerations":{},"f:volumes":{}}}`
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("calico-node-%05d", i), GenerateName: "calico-node-", Namespace: "kube-system",
			UID: "5c9e3a1b-7d2f-4e6a-8b0c-1f2e3d4c5b6a", ResourceVersion: fmt.Sprint(100000 + i),
			CreationTimestamp: ts, Generation: 1,
			Labels:      map[string]string{"controller-revision-hash": "6d8f7c9b5", "k8s-app": "calico-node", "pod-template-generation": "1"},
			Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "calico-node"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "calico-node",
				UID: "0b6e0c5d-2f1c-4f7e-9b5e-6d1f4c2a9e11", Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", FieldsV1: fields(spec)},
				{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", FieldsV1: fields(`{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"PodScheduled\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}}}}`), Subresource: "status"},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", FieldsV1: fields(status), Subresource: "status"},
			},
		},
	}
}

// watchStream is a protobuf watch response, as the API server writes one
// for the metadata client's Accept header: length-delimited WatchEvents
// whose objects are runtime.Unknown-wrapped PartialObjectMetadata.
func watchStream(tb testing.TB, events []watch.Event) []byte {
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	obj := protobuf.NewSerializer(scheme, scheme)
	raw := protobuf.NewRawSerializer(scheme, scheme)
	var out bytes.Buffer
	fw := protobuf.LengthDelimitedFramer.NewFrameWriter(&out)
	for _, e := range events {
		var ob, eb bytes.Buffer
		if err := obj.Encode(e.Object, &ob); err != nil {
			tb.Fatal(err)
		}
		if err := raw.Encode(&metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: ob.Bytes()}}, &eb); err != nil {
			tb.Fatal(err)
		}
		if _, err := fw.Write(eb.Bytes()); err != nil {
			tb.Fatal(err)
		}
	}
	return out.Bytes()
}

// eventDecoder decodes a protobuf watch response as a rest client with
// serializer ns does (rest.Request.Watch's newStreamWatcher).
func eventDecoder(tb testing.TB, ns runtime.NegotiatedSerializer, stream []byte) *restclientwatch.Decoder {
	od, sd, framer, err := runtime.NewClientNegotiator(ns, schema.GroupVersion{}).StreamDecoder(runtime.ContentTypeProtobuf, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), sd), od)
}

func metadataSerializer() runtime.NegotiatedSerializer {
	return metadata.ConfigFor(&rest.Config{}).NegotiatedSerializer
}

// The session's decoder keeps each event's type and resourceVersion, an
// ERROR event's Status, and nothing else.
func TestWatchEventsDecodeToVersions(t *testing.T) {
	gone := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: http.StatusGone, Message: "too old resource version: 1 (200)"}
	bookmark := &metav1.PartialObjectMetadata{TypeMeta: pod(0).TypeMeta, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "100500"}}
	stream := watchStream(t, []watch.Event{{Type: watch.Added, Object: pod(1)}, {Type: watch.Bookmark, Object: bookmark}, {Type: watch.Deleted, Object: pod(2)}, {Type: watch.Error, Object: gone}})
	d := eventDecoder(t, newVersionsOnly(metadataSerializer()), stream)
	var got []string
	for {
		typ, obj, err := d.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *metav1.PartialObjectMetadata:
			if o.Name != "" || o.ManagedFields != nil || o.Labels != nil {
				t.Errorf("a %s event decoded more than its version: %+v", typ, o.ObjectMeta)
			}
			got = append(got, fmt.Sprintf("%s %s", typ, o.ResourceVersion))
		case *metav1.Status:
			got = append(got, fmt.Sprintf("%s %d %s", typ, o.Code, o.Reason))
		default:
			t.Fatalf("a %s event decoded to %T", typ, obj)
		}
	}
	want := []string{"ADDED 100001", "BOOKMARK 100500", "DELETED 100002", "ERROR 410 Expired"}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded %q, want %q", got, want)
	}
}

// A list decodes to its resourceVersion and continue token, in protobuf
// and in JSON.
func TestListDecodesToVersions(t *testing.T) {
	l := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4242", Continue: "next-page"}, Items: []metav1.PartialObjectMetadata{*pod(1), *pod(2)}}
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(l, &pb); err != nil {
		t.Fatal(err)
	}
	js := `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"4242","continue":"next-page"},"items":[{"metadata":{"name":"x","managedFields":[{"manager":"kubelet"}]}}]}`
	neg := runtime.NewClientNegotiator(newVersionsOnly(metadataSerializer()), schema.GroupVersion{})
	for ct, body := range map[string][]byte{runtime.ContentTypeProtobuf: pb.Bytes(), runtime.ContentTypeJSON: []byte(js)} {
		dec, err := neg.Decoder(ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := runtime.Decode(dec, body)
		if err != nil {
			t.Fatalf("%s: %v", ct, err)
		}
		got, ok := obj.(*metav1.PartialObjectMetadataList)
		if !ok || got.ResourceVersion != "4242" || got.Continue != "next-page" || len(got.Items) != 0 {
			t.Errorf("%s: decoded %#v, want only resourceVersion 4242 and continue next-page", ct, obj)
		}
	}
}

// BenchmarkWatchDecode decodes a watch response of 200 pod events (with
// their managedFields) as client-go's metadata client does and as the
// session does.
func BenchmarkWatchDecode(b *testing.B) {
	events := make([]watch.Event, 200)
	for i := range events {
		events[i] = watch.Event{Type: watch.Modified, Object: pod(i)}
	}
	stream := watchStream(b, events)
	for name, ns := range map[string]runtime.NegotiatedSerializer{"metadata-client": metadataSerializer(), "session": newVersionsOnly(metadataSerializer())} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				d := eventDecoder(b, ns, stream)
				for {
					_, obj, err := d.Decode()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if m, ok := obj.(*metav1.PartialObjectMetadata); !ok || m.ResourceVersion == "" {
						b.Fatalf("decoded %T without a version", obj)
					}
				}
			}
		})
	}
}

// With names (a Typha session's cache keys), a list decodes to its items'
// namespace, name and version and an event to its object's, in protobuf
// and in JSON; without, the same bytes give no names (TestListDecodesToVersions).
func TestNamesDecodeForTyphaCaches(t *testing.T) {
	l := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4242"}, Items: []metav1.PartialObjectMetadata{*pod(1), *pod(2)}}
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(l, &pb); err != nil {
		t.Fatal(err)
	}
	js := `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"4242"},"items":[` +
		`{"metadata":{"name":"calico-node-00001","namespace":"kube-system","resourceVersion":"100001","managedFields":[{"manager":"kubelet"}]}},` +
		`{"metadata":{"name":"calico-node-00002","namespace":"kube-system","resourceVersion":"100002"}}]}`
	want := []string{"kube-system/calico-node-00001@100001", "kube-system/calico-node-00002@100002"}
	neg := runtime.NewClientNegotiator(newVersionsOnly(metadataSerializer(), true), schema.GroupVersion{})
	for ct, body := range map[string][]byte{runtime.ContentTypeProtobuf: pb.Bytes(), runtime.ContentTypeJSON: []byte(js)} {
		dec, err := neg.Decoder(ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := runtime.Decode(dec, body)
		if err != nil {
			t.Fatalf("%s: %v", ct, err)
		}
		got, ok := obj.(*metav1.PartialObjectMetadataList)
		if !ok {
			t.Fatalf("%s: decoded %T", ct, obj)
		}
		var keys []string
		for _, it := range got.Items {
			keys = append(keys, it.Namespace+"/"+it.Name+"@"+it.ResourceVersion)
			if it.ManagedFields != nil || it.UID != "" {
				t.Errorf("%s: an item decoded more than its key and version: %+v", ct, it.ObjectMeta)
			}
		}
		if !slices.Equal(keys, want) || got.ResourceVersion != "4242" {
			t.Errorf("%s: decoded items %q at %s, want %q at 4242", ct, keys, got.ResourceVersion, want)
		}
	}
	stream := watchStream(t, []watch.Event{{Type: watch.Modified, Object: pod(3)}})
	typ, obj, err := eventDecoder(t, newVersionsOnly(metadataSerializer(), true), stream).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := obj.(*metav1.PartialObjectMetadata); !ok || typ != watch.Modified || o.Namespace+"/"+o.Name+"@"+o.ResourceVersion != "kube-system/calico-node-00003@100003" {
		t.Fatalf("decoded a %s event %#v, want kube-system/calico-node-00003@100003", typ, obj)
	}
}
