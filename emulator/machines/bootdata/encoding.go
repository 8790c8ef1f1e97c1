package bootdata

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// The steps both agents take for a write_files encoding are the same
// (cloud-init cloudinit/config/cc_write_files.py canonicalize_extraction,
// canonical/cloud-init@04eacd06ee60de9dbb9e7be784be20dab7342c1a;
// cloudbase-init .../cloudconfigplugins/write_files.py _decode_steps,
// cloudbase/cloudbase-init@c48d7596bf5e176c72c01fc70d2006d4b84cb573):
// base64 then gzip, and an unknown encoding is written as plain text with
// a warning. What differs is what a failing step does, which is the
// agents' business.
const (
	StepBase64 = "base64"
	StepGzip   = "gzip"
)

// Decoded is content decoded step by step.
type Decoded struct {
	// Content is what the last step that succeeded produced (the raw
	// content when the first step failed).
	Content []byte
	// Failed is the step that failed ("" when none did) and Err its
	// error, in the words of Python's base64 and gzip modules, which both
	// agents use.
	Failed string
	Err    error
	// Unknown is set when the encoding is none the agents know: they
	// write the content as it is and warn.
	Unknown bool
}

// Steps are the decoding steps of an encoding, in order.
func Steps(encoding string) (steps []string, unknown bool) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "text/plain":
		return nil, false
	case "gz", "gzip":
		return []string{StepGzip}, false
	case "gz+base64", "gzip+base64", "gz+b64", "gzip+b64":
		return []string{StepBase64, StepGzip}, false
	case "b64", "base64":
		return []string{StepBase64}, false
	}
	return nil, true
}

// Decode runs the steps of encoding on raw and stops at the first that
// fails.
func Decode(raw, encoding string) Decoded {
	steps, unknown := Steps(encoding)
	d := Decoded{Content: []byte(raw), Unknown: unknown}
	for _, s := range steps {
		out, err := step(s, d.Content)
		if err != nil {
			d.Failed, d.Err = s, err
			return d
		}
		d.Content = out
	}
	return d
}

// DecodeStep runs one step; an agent that goes on after a failing step
// (cloudbase-init) runs the next one on what it has.
func DecodeStep(s string, in []byte) ([]byte, error) { return step(s, in) }

func step(s string, in []byte) ([]byte, error) {
	if s == StepGzip {
		zr, err := gzip.NewReader(bytes.NewReader(in))
		if err != nil {
			// Python's gzip: BadGzipFile("Not a gzipped file (%r)" % magic).
			magic := in
			if len(magic) > 2 {
				magic = magic[:2]
			}
			return nil, fmt.Errorf("Not a gzipped file (b'%s')", magic)
		}
		return io.ReadAll(zr)
	}
	return pythonB64Decode(in)
}

// pythonB64Decode decodes as Python's base64.b64decode without validate:
// characters outside the alphabet are dropped, then the padding must be
// right; its binascii.Error messages are kept.
func pythonB64Decode(in []byte) ([]byte, error) {
	var kept []byte
	for _, c := range in {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' {
			kept = append(kept, c)
		}
	}
	data := strings.TrimRight(string(kept), "=")
	if len(data)%4 == 1 {
		return nil, fmt.Errorf("Invalid base64-encoded string: number of data characters (%d) cannot be 1 more than a multiple of 4", len(data))
	}
	out, err := base64.StdEncoding.DecodeString(string(kept))
	if err != nil {
		return nil, fmt.Errorf("Incorrect padding")
	}
	return out, nil
}
