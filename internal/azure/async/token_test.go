package async_test

import (
	"testing"

	"github.com/winkube/winkube/internal/azure/async"
)

// A resume token is resumed only when every URL in it is on the ARM
// endpoint: another host, scheme or port, a token that is not the SDK's
// JSON, or credentials in the URL are refused.
func TestTokenOnEndpoint(t *testing.T) {
	const arm = "https://management.azure.com/"
	for token, want := range map[string]bool{
		`{"type":"PUT","token":{"asyncURL":"https://management.azure.com/op/1?api-version=1","origURL":"https://management.azure.com/x","method":"PUT","state":"InProgress"}}`: true,
		`{"type":"DELETE","token":{"asyncURL":"https://MANAGEMENT.azure.com/op/1","locURL":""}}`:                                                                               true,
		`{"type":"PUT","token":{"asyncURL":"https://127.0.0.1:9443/steal","origURL":"https://management.azure.com/x"}}`:                                                        false,
		`{"type":"PUT","token":{"pollURL":"http://management.azure.com/op"}}`:                                                                                                  false,
		`{"type":"PUT","token":{"pollURL":"https://management.azure.com:8443/op"}}`:                                                                                            false,
		`{"type":"PUT","token":{"pollURL":"https://user:pw@management.azure.com/op"}}`:                                                                                         false,
		`{"type":"PUT","token":{"pollURL":"//evil.example/op"}}`:                                                                                                               false,
		`{"type":"PUT","token":{"nested":["https://evil.example/op"]}}`:                                                                                                        false,
		`not json`:                          false,
		`"https://management.azure.com/op"`: false,
	} {
		if got := async.TokenOnEndpoint(token, arm); got != want {
			t.Errorf("TokenOnEndpoint(%s) = %v, want %v", token, got, want)
		}
	}
}
