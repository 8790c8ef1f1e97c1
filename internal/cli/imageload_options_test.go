package cli

import (
	"strings"
	"testing"
)

// TestImageLoadOptionsValidate: a --ref no image could carry is refused
// before the world or the files are read, as bad input naming the flag.
func TestImageLoadOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		ref   string
		paths []string
		want  string // "" for valid
	}{
		{"no --ref", "", []string{"a.tar", "b.tar"}, ""},
		{"a reference", "example.com/app:1.0", []string{"a.tar"}, ""},
		{"Docker Hub's short form", "app", []string{"a.tar"}, ""},
		{"by digest", "example.com/app@sha256:" + strings.Repeat("a", 64), []string{"a.tar"}, ""},
		{"one name for two paths", "example.com/app:1.0", []string{"a.tar", "b.tar"}, "--ref names one image: give one PATH with it"},
		{"upper case", "Example.com/App:1", []string{"a.tar"}, `--ref "Example.com/App:1" is not an image reference`},
		{"a URL", "https://example.com/app:1.0", []string{"a.tar"}, "write it as example.com/app:1.0"},
	} {
		o := imageLoadOptions{ref: c.ref, Paths: c.paths}
		wantBadInput(t, c.name, o.Validate(), c.want)
	}
}
