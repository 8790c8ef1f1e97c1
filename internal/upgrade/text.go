package upgrade

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/winkube/winkube/internal/doctor"
)

// WriteText prints the plan for a terminal: the steps in order, then the
// findings with their fixes as the doctor prints them.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Upgrading cluster %s from %s to %s: the control plane, then the Linux pools, then the Windows pools, each once the one before is Ready.\n\n", p.Cluster, p.From, p.Target)
	if len(p.Steps) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STEP\tKIND\tNAME\tOS\tFROM\tTO\tNEW TEMPLATE")
		for i, st := range p.Steps {
			os := st.OS
			if st.Windows != "" {
				os += " " + string(st.Windows)
			}
			nt := strings.Trim(st.NewTemplate+", "+st.NewBootstrapTemplate, ", ")
			if nt == "" {
				nt = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, st.Kind, st.Name, os, st.From, p.Target, nt)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	doctor.WriteFindings(&b, p.Findings)
	r := doctor.Report{Findings: p.Findings}
	fmt.Fprintf(&b, "%d step(s): %d error(s), %d warning(s)\n", len(p.Steps), r.Count(doctor.Error), r.Count(doctor.Warning))
	_, err := io.WriteString(w, b.String())
	return err
}
