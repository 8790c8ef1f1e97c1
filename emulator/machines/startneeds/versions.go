package startneeds

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"google.golang.org/protobuf/encoding/protowire"
)

// A session's lists and watches are the requests client-go's metadata
// client makes (same path, query, Accept header, rate limiter, retries:
// k8s.io/client-go v0.36.3 metadata/metadata.go, List and Watch), so the
// API server does the same work and the component's RBAC is checked the
// same way. What differs is what the simulation decodes of the answers:
// it reads only what it uses, each event's type and metadata.resourceVersion
// (the Status of an ERROR event in full), and a list's resourceVersion and
// continue token. client-go would decode every object's whole metadata,
// managedFields included, and at 500 nodes every Pod and Node change is
// decoded once per calico-node: that was a simulation cost (a fifth of
// winkube's CPU went to decoding watches), not the component's behaviour.
type versionsClient struct{ rc *rest.RESTClient }

// Accept headers of client-go's metadata client (metadata.go, v0.36.3).
const (
	acceptObject = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	acceptList   = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)

var (
	parameterScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		metav1.AddToGroupVersion(s, versionV1)
		return s
	}()
	parameterCodec = runtime.NewParameterCodec(parameterScheme)
	versionV1      = schema.GroupVersion{Version: "v1"}
)

// newVersionsClient is metadata.NewForConfig's client with a negotiator
// that decodes only versions.
// With names, objects' names and namespaces are read too, and a list's
// items (a fan-out server's cache keys them).
func newVersionsClient(cfg *rest.Config, names ...bool) (*versionsClient, error) {
	c := metadata.ConfigFor(cfg)
	c.NegotiatedSerializer = newVersionsOnly(c.NegotiatedSerializer, names...)
	c.GroupVersion = &schema.GroupVersion{}
	c.APIPath = "/this-value-should-never-be-sent"
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	rc, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, err
	}
	return &versionsClient{rc: rc}, nil
}

func resourcePath(gvr schema.GroupVersionResource) []string {
	if gvr.Group == "" {
		return []string{"api", gvr.Version, gvr.Resource}
	}
	return []string{"apis", gvr.Group, gvr.Version, gvr.Resource}
}

// list returns the list's metadata only (no items).
func (c *versionsClient) list(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	res := c.rc.Get().AbsPath(resourcePath(gvr)...).
		SetHeader("Accept", acceptList).
		SpecificallyVersionedParams(&opts, parameterCodec, versionV1).
		Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	obj, err := res.Get()
	if err != nil {
		return nil, err
	}
	l, ok := obj.(*metav1.PartialObjectMetadataList)
	if !ok {
		return nil, fmt.Errorf("unexpected object, expected PartialObjectMetadataList but got %T", obj)
	}
	return l, nil
}

// watch's events carry a *metav1.PartialObjectMetadata with only its
// resourceVersion, or an ERROR's *metav1.Status.
func (c *versionsClient) watch(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error) {
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	opts.Watch = true
	return c.rc.Get().AbsPath(resourcePath(gvr)...).
		SetHeader("Accept", acceptObject).
		SpecificallyVersionedParams(&opts, parameterCodec, versionV1).
		Timeout(timeout).
		Watch(ctx)
}

// versionsOnly is the metadata client's serializer with decoders that
// read only versions; encoding and every other kind (a Status) are the
// real serializer's.
type versionsOnly struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func newVersionsOnly(real runtime.NegotiatedSerializer, names ...bool) versionsOnly {
	withNames := len(names) > 0 && names[0]
	infos := append([]runtime.SerializerInfo(nil), real.SupportedMediaTypes()...)
	for i := range infos {
		info := &infos[i]
		switch info.MediaType {
		case runtime.ContentTypeProtobuf:
			info.Serializer = versionsDecoder{Serializer: info.Serializer, proto: true, names: withNames}
			if info.StreamSerializer != nil {
				s := *info.StreamSerializer
				s.Serializer = eventsDecoder{Serializer: s.Serializer}
				info.StreamSerializer = &s
			}
		case runtime.ContentTypeJSON:
			info.Serializer = versionsDecoder{Serializer: info.Serializer, names: withNames}
		}
	}
	return versionsOnly{NegotiatedSerializer: real, infos: infos}
}

func (v versionsOnly) SupportedMediaTypes() []runtime.SerializerInfo { return v.infos }

// protoPrefix starts every protobuf-encoded Kubernetes object
// (k8s.io/apimachinery runtime/serializer/protobuf).
var protoPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

var (
	partialGVK     = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")
	partialListGVK = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadataList")
)

// versionsDecoder decodes a PartialObjectMetadata to its resourceVersion
// and a PartialObjectMetadataList to its resourceVersion and continue
// token; anything else (a Status) goes to the real decoder.
type versionsDecoder struct {
	runtime.Serializer
	proto, names bool
}

func (d versionsDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into == nil {
		var obj runtime.Object
		var ok bool
		if d.proto {
			obj, ok = protoVersions(data, d.names)
		} else {
			obj, ok = jsonVersions(data, d.names)
		}
		if ok {
			gvk := obj.GetObjectKind().GroupVersionKind()
			return obj, &gvk, nil
		}
	}
	return d.Serializer.Decode(data, defaults, into)
}

// protoVersions reads a runtime.Unknown envelope (raw = 2, typeMeta = 1
// with kind = 2) and, for the two partial kinds, the metadata field (1)
// of the object: ObjectMeta.resourceVersion = 6, ListMeta.resourceVersion
// = 2 and continue = 3 (apimachinery pkg/apis/meta/v1/generated.proto and
// pkg/runtime/generated.proto, v0.36.3). With names, also ObjectMeta's
// name = 1 and namespace = 3, and a list's items = 2 (each a
// PartialObjectMetadata whose metadata is field 1).
func protoVersions(data []byte, names bool) (runtime.Object, bool) {
	body, ok := bytes.CutPrefix(data, protoPrefix)
	if !ok {
		return nil, false
	}
	typeMeta, _ := protoField(body, 1)
	raw, _ := protoField(body, 2)
	kind, _ := protoField(typeMeta, 2)
	md, _ := protoField(raw, 1)
	switch string(kind) {
	case partialGVK.Kind:
		o := &metav1.PartialObjectMetadata{ObjectMeta: protoObjectMeta(md, names)}
		o.SetGroupVersionKind(partialGVK)
		return o, true
	case partialListGVK.Kind:
		rv, _ := protoField(md, 2)
		cont, _ := protoField(md, 3)
		l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: string(rv), Continue: string(cont)}}
		if names {
			protoEach(raw, 2, func(item []byte) {
				imd, _ := protoField(item, 1)
				l.Items = append(l.Items, metav1.PartialObjectMetadata{ObjectMeta: protoObjectMeta(imd, true)})
			})
		}
		l.SetGroupVersionKind(partialListGVK)
		return l, true
	}
	return nil, false
}

func protoObjectMeta(md []byte, names bool) metav1.ObjectMeta {
	rv, _ := protoField(md, 6)
	om := metav1.ObjectMeta{ResourceVersion: string(rv)}
	if names {
		name, _ := protoField(md, 1)
		ns, _ := protoField(md, 3)
		om.Name, om.Namespace = string(name), string(ns)
	}
	return om
}

// protoEach calls f with every value of length-delimited field num in msg.
func protoEach(msg []byte, num protowire.Number, f func([]byte)) {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return
			}
			f(v)
			msg = msg[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, typ, msg); l < 0 {
			return
		}
		msg = msg[l:]
	}
}

// protoField is the last value of length-delimited field num in msg (the
// one a protobuf decoder keeps), skipping every other field unread.
func protoField(msg []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil, false
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil, false
			}
			out, found = v, true
			msg = msg[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil, false
		}
		msg = msg[l:]
	}
	return out, found
}

// jsonVersions reads the same from a JSON object: encoding/json skips
// the fields the struct does not name without building them.
func jsonVersions(data []byte, names bool) (runtime.Object, bool) {
	type meta struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	}
	var v struct {
		Kind     string `json:"kind"`
		Metadata meta   `json:"metadata"`
	}
	var items struct {
		Items []struct {
			Metadata meta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	if !names {
		v.Metadata.Name, v.Metadata.Namespace = "", ""
	} else if v.Kind == partialListGVK.Kind {
		if err := json.Unmarshal(data, &items); err != nil {
			return nil, false
		}
	}
	switch v.Kind {
	case partialGVK.Kind:
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: v.Metadata.Name, Namespace: v.Metadata.Namespace, ResourceVersion: v.Metadata.ResourceVersion}}
		o.SetGroupVersionKind(partialGVK)
		return o, true
	case partialListGVK.Kind:
		l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: v.Metadata.ResourceVersion, Continue: v.Metadata.Continue}}
		for _, it := range items.Items {
			l.Items = append(l.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: it.Metadata.Name, Namespace: it.Metadata.Namespace, ResourceVersion: it.Metadata.ResourceVersion}})
		}
		l.SetGroupVersionKind(partialListGVK)
		return l, true
	}
	return nil, false
}

// eventsDecoder reads a protobuf watch frame (a metav1.WatchEvent, raw:
// type = 1, object = 2 whose raw = 1) without copying the object: the
// object decoder reads it before the next frame is read.
type eventsDecoder struct{ runtime.Serializer }

func (d eventsDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	typ, ok1 := protoField(data, 1)
	obj, ok2 := protoField(data, 2)
	raw, ok3 := protoField(obj, 1)
	if !ok1 || !ok2 || !ok3 {
		return d.Serializer.Decode(data, defaults, into)
	}
	ev.Type = watchEventType(typ)
	ev.Object = runtime.RawExtension{Raw: raw}
	return ev, nil, nil
}

// watchEventType avoids a string allocation per event for the known
// types.
func watchEventType(b []byte) string {
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(b) == string(t) {
			return string(t)
		}
	}
	return string(b)
}
