package doctor

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints the findings for a terminal: severity, check and object,
// then the message and the fix indented under it, then a count.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	WriteFindings(&b, r.Findings)
	errs, warns := r.Count(Error), r.Count(Warning)
	switch {
	case errs == 0 && warns == 0:
		fmt.Fprintf(&b, "%d checks, no problems found\n", len(r.Checks))
	default:
		fmt.Fprintf(&b, "%d checks: %d error(s), %d warning(s)\n", len(r.Checks), errs, warns)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteFindings prints findings as WriteText does: severity, check and
// object, then the message and the fix indented under it.
func WriteFindings(b *strings.Builder, fs []Finding) {
	for _, f := range fs {
		fmt.Fprintf(b, "%-7s %s", strings.ToUpper(string(f.Severity)), f.Check)
		if f.Object != "" {
			fmt.Fprintf(b, "  %s", f.Object)
		}
		fmt.Fprintf(b, "\n        %s\n", f.Message)
		if f.Fix != "" {
			fmt.Fprintf(b, "        fix: %s\n", f.Fix)
		}
	}
}
