package controllers

import (
	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
)

// step is the outcome of one service call in a reconcile: done, or a
// long-running operation to resume next time.
type step struct {
	service, name string
}

// token is the resume token of the operation of kind (PUT or DELETE) under
// way for a step. A token of the other kind is not resumed: a pending
// create handed to BeginDelete would poll the create, and report the
// resource deleted when it was made.
func token(f infrav1.Futures, s step, kind string) string {
	for _, x := range f {
		if x.ServiceName == s.service && x.Name == s.name && x.Type == kind {
			return x.Data
		}
	}
	return ""
}

// record keeps (or, when next is empty, forgets) an operation's resume token.
func record(f *infrav1.Futures, s step, rg, kind, next string) {
	out := (*f)[:0]
	for _, x := range *f {
		if !(x.ServiceName == s.service && x.Name == s.name) {
			out = append(out, x)
		}
	}
	if next != "" {
		out = append(out, infrav1.Future{Type: kind, ServiceName: s.service, Name: s.name, ResourceGroup: rg, Data: next})
	}
	if len(out) == 0 {
		out = nil
	}
	*f = out
}

func resourcegroupsSpec(name, location string, t map[string]*string) resourcegroups.Spec {
	return resourcegroups.Spec{Name: name, Location: location, Tags: t}
}

// action is one service call of a reconcile, resumable from a token.
type action struct {
	s   step
	run func(token string) (next string, done bool, err error)
}

// runActions runs actions in order, each until done, keeping resume tokens
// in futures. It stops at the first action still under way (pending) or
// failed (err, with that action).
func runActions(futures *infrav1.Futures, rg, kind string, actions []action) (pending *step, failed *step, err error) {
	for i := range actions {
		a := &actions[i]
		next, done, err := a.run(token(*futures, a.s, kind))
		record(futures, a.s, rg, kind, next)
		if err != nil {
			return nil, &a.s, err
		}
		if !done {
			return &a.s, nil, nil
		}
	}
	return nil, nil, nil
}
