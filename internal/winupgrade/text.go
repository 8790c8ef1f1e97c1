package winupgrade

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/winkube/winkube/internal/doctor"
)

// WriteText prints the plan for a terminal: the nodes being replaced, a
// table of the Windows workloads' images, the findings with their fixes as
// the doctor prints them, and the new pools.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Moving Windows nodes to Windows Server %s (build %s).\n", p.Target, p.TargetBuild)
	builds := make([]string, 0, len(p.Leaving))
	for k := range p.Leaving {
		builds = append(builds, k)
	}
	sort.Strings(builds)
	if len(builds) == 0 {
		b.WriteString("No Windows node of another build: nothing is being replaced.\n")
	}
	for _, k := range builds {
		nodes := append([]string(nil), p.Leaving[k]...)
		sort.Strings(nodes)
		fmt.Fprintf(&b, "Replacing %d node(s) of %s: %s\n", len(nodes), describe(k), strings.Join(nodes, ", "))
	}
	b.WriteString("\n")
	if len(p.Images) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "WORKLOAD\tCONTAINER\tIMAGE\tWINDOWS BUILDS\tON %s\tUSE INSTEAD\n", p.Target)
		for _, im := range p.Images {
			runs, builds := "no", strings.Join(im.Builds, ",")
			if im.RunsOnTarget {
				runs = "yes"
			}
			if im.Error != "" {
				runs, builds = "?", "unreadable"
			}
			use := im.Use
			if use == "" {
				use = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", im.Workload, im.Container, im.Image, builds, runs, use)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	} else {
		b.WriteString("No workload runs Windows images.\n\n")
	}
	r := doctor.Report{Findings: p.Findings}
	doctor.WriteFindings(&b, p.Findings)
	for _, pool := range p.Pools {
		fmt.Fprintf(&b, "NEW POOL %s %s (%d replicas, Windows Server %s) replaces %s (Windows Server %s)\n", pool.Kind, pool.NewName, pool.Replicas, p.Target, pool.Name, pool.From)
	}
	fmt.Fprintf(&b, "%d image(s) in Windows workloads: %d error(s), %d warning(s)\n", len(p.Images), r.Count(doctor.Error), r.Count(doctor.Warning))
	_, err := io.WriteString(w, b.String())
	return err
}
