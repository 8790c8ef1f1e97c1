package flavors

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// YAML renders objects as one YAML stream with apiVersion and kind, without
// empty status or creation timestamps.
func YAML(s *runtime.Scheme, objs []client.Object) ([]byte, error) {
	var out bytes.Buffer
	for i, o := range objs {
		gvks, _, err := s.ObjectKinds(o)
		if err != nil || len(gvks) == 0 {
			return nil, fmt.Errorf("no kind for %T: %w", o, err)
		}
		o = o.DeepCopyObject().(client.Object)
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
		data, err := manifestYAML(o)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(data)
	}
	return out.Bytes(), nil
}

// manifestYAML renders o as YAML without what a generated object has but a
// manifest should not. It cleans o's JSON, which sigs.k8s.io/yaml marshals
// through anyway: cleaning the YAML instead parsed and emitted every object
// twice more, most of the time of rendering a flavor (the add-ons'
// ConfigMaps hold Calico's half a megabyte of manifest).
func manifestYAML(o any) ([]byte, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if spec, ok := m["spec"].(map[string]any); ok {
		if tmpl, ok := spec["template"].(map[string]any); ok {
			if md, ok := tmpl["metadata"].(map[string]any); ok {
				delete(md, "creationTimestamp")
				if len(md) == 0 {
					delete(tmpl, "metadata")
				}
			}
		}
	}
	return yaml.Marshal(m)
}

// JSON renders objects as a v1 List, as kubectl get -o json prints several.
func JSON(s *runtime.Scheme, objs []client.Object) ([]byte, error) {
	data, err := YAML(s, objs)
	if err != nil {
		return nil, err
	}
	var items []any
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		items = append(items, m)
	}
	out, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
