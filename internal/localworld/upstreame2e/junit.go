package upstreame2e

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Result is one spec's outcome as Ginkgo's JUnit report gives it.
type Result struct {
	Name string
	// Status is Ginkgo's spec state: passed, failed, skipped, pending,
	// panicked, interrupted, aborted or timedout.
	Status string
	// Why is the first line of the failure (or of the skip's message).
	Why     string
	Seconds float64
}

// Failed says whether the spec counts as a failure.
func (r Result) Failed() bool {
	switch r.Status {
	case "passed", "skipped", "pending":
		return false
	}
	return true
}

// The elements of Ginkgo's JUnit report this package reads (the layout is
// onsi/ginkgo/v2 reporters/junit_report.go at v2.28.1, which hack/e2e pins).
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *junitProblem `xml:"failure"`
			Error   *junitProblem `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// ReadJUnit reads a Ginkgo JUnit report into one Result per spec.
func ReadJUnit(r io.Reader) ([]Result, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var out []Result
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			res := Result{Name: c.Name, Status: c.Status, Seconds: c.Time}
			switch {
			case c.Failure != nil:
				res.Why = firstLine(c.Failure.Message, c.Failure.Text)
			case c.Error != nil:
				res.Why = firstLine(c.Error.Message, c.Error.Text)
			case c.Skipped != nil:
				res.Why = firstLine(c.Skipped.Message)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

func firstLine(texts ...string) string {
	for _, t := range texts {
		for _, l := range strings.Split(t, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
	}
	return ""
}

// Summary is the report a run prints: counts, then each spec that ran or was
// skipped with its reason, failures first.
func Summary(results []Result) string {
	rs := append([]Result(nil), results...)
	rank := func(r Result) int {
		switch {
		case r.Failed():
			return 0
		case r.Status == "passed":
			return 1
		}
		return 2
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rank(rs[i]) != rank(rs[j]) {
			return rank(rs[i]) < rank(rs[j])
		}
		return rs[i].Name < rs[j].Name
	})
	var passed, failed, skipped int
	var b strings.Builder
	for _, r := range rs {
		switch {
		case r.Failed():
			failed++
			fmt.Fprintf(&b, "FAIL %s (%.0fs)\n     %s\n", r.Name, r.Seconds, r.Why)
		case r.Status == "passed":
			passed++
			fmt.Fprintf(&b, "PASS %s (%.0fs)\n", r.Name, r.Seconds)
		default:
			skipped++
			why := r.Why
			if s, ok := SkipFor(r.Name); ok {
				why = "not modelled locally: " + s.Reason + " (" + s.Source + ")"
			}
			fmt.Fprintf(&b, "SKIP %s\n     %s\n", r.Name, why)
		}
	}
	return fmt.Sprintf("upstream [sig-windows] e2e: %d passed, %d failed, %d skipped\n", passed, failed, skipped) + b.String()
}
