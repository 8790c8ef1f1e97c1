// Package nodelogs collects a node's logs: what CAPZ's log collector
// gathers from its Windows and Linux nodes, each into a file of a folder or
// a tar archive, with an index saying what each file is and how it was
// read. It knows nothing of how commands reach the node (a Runner: SSH, or
// Azure's Run Command for a machine nobody can reach).
package nodelogs

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Runner runs a command on the node.
type Runner interface {
	Run(cmd string, stdout, stderr io.Writer) error
}

// Transport is how the commands reach the node.
type Transport struct {
	// Name is SSH or Run Command, as the index says.
	Name string
	// Limit, when not zero, is how many bytes of a command's output the
	// transport returns at most: the output's end.
	Limit int
}

// Result is what became of one item.
type Result struct {
	Item
	Transport string
	Bytes     int
	// Truncated: the output reached the transport's limit, so its
	// beginning is probably missing.
	Truncated bool
	// Err is the command's failure; its error output is in Stderr.
	Err    error
	Stderr string
}

// Collect runs the plan on the node and hands each output to sink. A
// failing command does not stop the others: its error output is kept in
// a FILE.error entry. since, when not zero, drops log lines older than it.
func Collect(r Runner, via Transport, plan []Item, since time.Time, sink Sink, progress func(Result)) ([]Result, error) {
	var out []Result
	for _, it := range plan {
		var stdout, stderr bytes.Buffer
		err := r.Run(it.Command, &stdout, &stderr)
		data := stdout.Bytes()
		truncated := via.Limit > 0 && len(data) >= via.Limit
		if !since.IsZero() {
			data = Since(data, since, time.Now())
		}
		res := Result{Item: it, Transport: via.Name, Bytes: len(data), Truncated: truncated, Err: err, Stderr: strings.TrimSpace(stderr.String())}
		if err := sink.Add(it.File, data); err != nil {
			return out, err
		}
		if err != nil {
			msg := fmt.Sprintf("%s\n%v\n%s\n", it.Command, err, res.Stderr)
			if err := sink.Add(it.File+".error", []byte(msg)); err != nil {
				return out, err
			}
		}
		out = append(out, res)
		if progress != nil {
			progress(res)
		}
	}
	return out, nil
}

// stamp formats found at the start of log lines: RFC 3339 (winkube's and
// many agents'), cloudbase-init's, journalctl's short-precise and klog's.
var stamps = []struct {
	re     *regexp.Regexp
	layout string
	noYear bool
}{
	{regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), time.RFC3339Nano, false},
	{regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?`), "2006-01-02 15:04:05.999999999", false},
	{regexp.MustCompile(`^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(\.\d+)?`), "Jan _2 15:04:05.999999999", true},
	{regexp.MustCompile(`^[IWEF](\d{4} \d\d:\d\d:\d\d(\.\d+)?)`), "0102 15:04:05.999999999", true},
}

// lineTime reads a line's leading time stamp; lines without one (a
// message's continuation) belong with the line before.
func lineTime(line string, now time.Time) (time.Time, bool) {
	for _, s := range stamps {
		m := s.re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := m[0]
		if len(m) > 1 && s.layout == "0102 15:04:05.999999999" {
			text = m[1]
		}
		t, err := time.ParseInLocation(s.layout, text, time.UTC)
		if err != nil {
			continue
		}
		if s.noYear {
			t = t.AddDate(now.Year(), 0, 0)
			if t.After(now.Add(24 * time.Hour)) {
				t = t.AddDate(-1, 0, 0)
			}
		}
		return t, true
	}
	return time.Time{}, false
}

// Since keeps the lines of a log from since on. Lines before the first
// time stamp are kept (headers), and a line without one goes with the
// line before it.
func Since(data []byte, since, now time.Time) []byte {
	var out bytes.Buffer
	keep := true
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if t, ok := lineTime(line, now); ok {
			keep = !t.Before(since)
		}
		if keep {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// Sink receives the collected files.
type Sink interface {
	Add(name string, data []byte) error
	Close() error
}

// NewSink writes into path: a .tar or .tar.gz/.tgz archive, or else a
// folder, which must not hold files already (nothing is overwritten).
func NewSink(path string) (Sink, error) {
	switch {
	case strings.HasSuffix(path, ".tar"), strings.HasSuffix(path, ".tar.gz"), strings.HasSuffix(path, ".tgz"):
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("log archive: %w", err)
		}
		s := &tarSink{f: f, w: f, root: strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".tgz"), ".tar")}
		if !strings.HasSuffix(path, ".tar") {
			s.gz = gzip.NewWriter(f)
			s.w = s.gz
		}
		s.tw = tar.NewWriter(s.w)
		return s, nil
	}
	if entries, err := os.ReadDir(path); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("log folder %s is not empty: name a new folder or a .tar/.tar.gz file", path)
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	return dirSink(path), nil
}

type dirSink string

func (d dirSink) Add(name string, data []byte) error {
	return os.WriteFile(filepath.Join(string(d), name), data, 0o600)
}

func (d dirSink) Close() error { return nil }

type tarSink struct {
	f    *os.File
	w    io.Writer
	gz   *gzip.Writer
	tw   *tar.Writer
	root string
}

func (t *tarSink) Add(name string, data []byte) error {
	hdr := &tar.Header{Name: t.root + "/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}
	if err := t.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := t.tw.Write(data)
	return err
}

func (t *tarSink) Close() error {
	err := t.tw.Close()
	if t.gz != nil {
		if e := t.gz.Close(); err == nil {
			err = e
		}
	}
	if e := t.f.Close(); err == nil {
		err = e
	}
	return err
}
