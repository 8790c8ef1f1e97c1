package arm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// deepCopy gives what a JSON round trip gives (bodies used to be copied
// that way), and a copy shares nothing with its original.
func TestDeepCopyIsAJSONRoundTrip(t *testing.T) {
	body := map[string]any{
		"name": "vm", "count": 3, "ratio": 1.5, "on": true, "none": nil,
		"zones":      []string{"1", "2"},
		"tags":       map[string]string{"a": "b"},
		"properties": map[string]any{"list": []any{map[string]any{"id": "x"}, 2.0, nil}, "empty": map[string]any(nil), "nolist": []any(nil)},
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	got := deepCopy(body)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("deepCopy gives\n%#v\na JSON round trip gives\n%#v", got, want)
	}
	obj(got, "properties")["list"].([]any)[0].(map[string]any)["id"] = "changed"
	if str(body["properties"].(map[string]any)["list"].([]any)[0].(map[string]any), "id") != "x" {
		t.Fatal("changing the copy changed the original")
	}
}
