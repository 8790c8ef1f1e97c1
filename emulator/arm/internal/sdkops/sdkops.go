// Package sdkops reads, from the source of an Azure SDK for Go resource
// manager module, the REST operations its clients call: HTTP method, path
// template, api-version, the status codes a client accepts and whether the
// operation is long-running. The clients are generated from
// azure-rest-api-specs, so this is what the specification says each
// operation answers; the emulator's conformance test holds it to that
// without anyone here writing the expectations down.
package sdkops

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Operation is one REST operation of a generated client.
type Operation struct {
	// ID is the specification's operation ID as the client names it:
	// "VirtualMachines_CreateOrUpdate".
	ID string
	// Method is the HTTP method; Path the template with {parameters}.
	Method, Path string
	APIVersion   string
	// Statuses are the codes the client accepts from the first response;
	// any other is an error to it.
	Statuses []int
	// LongRunning operations return a poller; FinalStateVia is how it
	// fetches the result ("location", "azure-async-operation",
	// "original-uri"), empty when the client leaves it to the default.
	LongRunning   bool
	FinalStateVia string
	// Pageable operations follow nextLink.
	Pageable bool
}

// Load parses every *_client.go file of a module directory.
func Load(dir string) ([]Operation, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_client.go"))
	if err != nil {
		return nil, err
	}
	// A module's unnamed client (armresources' Client, the spec's
	// Resources operations) lives in client.go.
	if _, err := os.Stat(filepath.Join(dir, "client.go")); err == nil {
		files = append(files, filepath.Join(dir, "client.go"))
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("sdkops: no generated clients in %s", dir)
	}
	consts, err := stringConsts(dir)
	if err != nil {
		return nil, err
	}
	var out []Operation
	for _, f := range files {
		ops, err := parseFile(f, consts)
		if err != nil {
			return nil, err
		}
		out = append(out, ops...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

type method struct {
	client, name string
	body         *ast.BlockStmt
}

func parseFile(path string, consts map[string]string) ([]Operation, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		return nil, err
	}
	var methods []method
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Body == nil || len(fn.Recv.List) != 1 {
			continue
		}
		star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		id, ok := star.X.(*ast.Ident)
		if !ok || !strings.HasSuffix(id.Name, "Client") {
			continue
		}
		methods = append(methods, method{client: id.Name, name: fn.Name.Name, body: fn.Body})
	}
	callers := func(callee, client string) []method {
		var out []method
		for _, m := range methods {
			if m.client == client && calls(m.body, callee) {
				out = append(out, m)
			}
		}
		return out
	}
	var ops []Operation
	for _, m := range methods {
		if !strings.HasSuffix(m.name, "CreateRequest") {
			continue
		}
		op := Operation{Path: urlPath(m.body), Method: httpMethod(m.body), APIVersion: apiVersion(m.body, consts)}
		if op.Path == "" || op.Method == "" {
			return nil, fmt.Errorf("sdkops: %s.%s: no URL path or HTTP method", m.client, m.name)
		}
		public := ""
		for _, c := range callers(m.name, m.client) {
			switch {
			case strings.HasPrefix(c.name, "New") && strings.HasSuffix(c.name, "Pager"):
				// FetcherForNextLink without options accepts 200 only.
				public, op.Pageable, op.Statuses = c.name, true, []int{http.StatusOK}
			case isExported(c.name):
				public, op.Statuses = c.name, statuses(c.body)
			default:
				// An internal step of a long-running operation: its
				// Begin method makes the poller.
				op.Statuses = statuses(c.body)
				for _, b := range callers(c.name, m.client) {
					if strings.HasPrefix(b.name, "Begin") {
						public, op.LongRunning, op.FinalStateVia = b.name, true, finalStateVia(b.body)
					}
				}
			}
		}
		if public == "" {
			return nil, fmt.Errorf("sdkops: %s.%s: no public method calls it", m.client, m.name)
		}
		name := strings.TrimPrefix(public, "Begin")
		if strings.HasPrefix(name, "New") && strings.HasSuffix(name, "Pager") {
			name = strings.TrimSuffix(strings.TrimPrefix(name, "New"), "Pager")
		}
		group := strings.TrimSuffix(m.client, "Client")
		if group == "" {
			group = "Resources"
		}
		op.ID = group + "_" + name
		ops = append(ops, op)
	}
	return ops, nil
}

func isExported(name string) bool { return name != "" && strings.ToUpper(name[:1]) == name[:1] }

// calls reports whether body calls client.<name>(...).
func calls(body *ast.BlockStmt, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == name {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "client" {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

func stringLit(e ast.Expr) string {
	if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
		if s, err := strconv.Unquote(bl.Value); err == nil {
			return s
		}
	}
	return ""
}

// urlPath is the literal of `urlPath := "..."`.
func urlPath(body *ast.BlockStmt) string {
	out := ""
	ast.Inspect(body, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && a.Tok == token.DEFINE && len(a.Lhs) == 1 && len(a.Rhs) == 1 {
			if id, ok := a.Lhs[0].(*ast.Ident); ok && id.Name == "urlPath" {
				out = stringLit(a.Rhs[0])
			}
		}
		return out == ""
	})
	return out
}

// httpMethod is the http.MethodX passed to runtime.NewRequest.
func httpMethod(body *ast.BlockStmt) string {
	out := ""
	ast.Inspect(body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || !isSel(c.Fun, "runtime", "NewRequest") || len(c.Args) < 2 {
			return true
		}
		if sel, ok := c.Args[1].(*ast.SelectorExpr); ok {
			out = strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method"))
		}
		return false
	})
	return out
}

// stringConsts are a module's package-level string constants: newer
// generators (armcompute v8) name each api-version once,
// reqQP.Set("api-version", version20260401).
func stringConsts(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v := stringLit(vs.Values[i]); v != "" {
							out[n.Name] = v
						}
					}
				}
			}
		}
	}
	return out, nil
}

// apiVersion is the value of reqQP.Set("api-version", "..."), a literal
// or one of the package's constants.
func apiVersion(body *ast.BlockStmt, consts map[string]string) string {
	out := ""
	ast.Inspect(body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if ok && len(c.Args) == 2 && stringLit(c.Args[0]) == "api-version" {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Set" {
				out = stringLit(c.Args[1])
				if id, ok := c.Args[1].(*ast.Ident); ok {
					out = consts[id.Name]
				}
			}
		}
		return out == ""
	})
	return out
}

var statusByName = map[string]int{
	"StatusOK": http.StatusOK, "StatusCreated": http.StatusCreated, "StatusAccepted": http.StatusAccepted,
	"StatusNoContent": http.StatusNoContent, "StatusNotFound": http.StatusNotFound,
}

// statuses are the codes of runtime.HasStatusCode(httpResp, ...).
func statuses(body *ast.BlockStmt) []int {
	var out []int
	ast.Inspect(body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || !isSel(c.Fun, "runtime", "HasStatusCode") {
			return true
		}
		for _, a := range c.Args[1:] {
			if sel, ok := a.(*ast.SelectorExpr); ok {
				if code, ok := statusByName[sel.Sel.Name]; ok {
					out = append(out, code)
				}
			}
		}
		return false
	})
	return out
}

// finalStateVia is the FinalStateVia of the poller options.
func finalStateVia(body *ast.BlockStmt) string {
	out := ""
	ast.Inspect(body, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "FinalStateVia" {
			if sel, ok := kv.Value.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "FinalStateViaLocation":
					out = "location"
				case "FinalStateViaAzureAsyncOp":
					out = "azure-async-operation"
				case "FinalStateViaOriginalURI":
					out = "original-uri"
				case "FinalStateViaOpLocation":
					out = "operation-location"
				}
			}
		}
		return out == ""
	})
	return out
}

func isSel(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
