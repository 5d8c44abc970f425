// Package testhandle reports a test's handle used off the test goroutine.
//
// testify runs the condition of Eventually, EventuallyWithT and Never in a
// goroutine of its own, as `go`, errgroup's and WaitGroup's Go,
// testing.B.RunParallel and testenv.Parallel run theirs. There, FailNow (and
// so require.*, t.Fatal) only ends that goroutine: in EventuallyWithT the
// condition then counts as met and the test carries on, in Eventually it
// waits out the whole timeout, elsewhere it breaks testing's contract. So a
// function run that way must not pass the test's own handle on (t, b, or a
// harness's s.t), stop through it, or call a method that does; it reports
// on its own handle (*assert.CollectT) or returns an error.
//
// testifylint's go-require looks at `go` statements and HTTP handlers only;
// this looks at every function literal run on another goroutine, and
// follows a closure it calls and a harness method that uses its receiver's
// handle (a fact exported from the harness's package).
package testhandle

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer is the check; hack/testlint runs it beside testifylint.
var Analyzer = &analysis.Analyzer{
	Name:      "testhandle",
	Doc:       "reports a test's handle (t, b, s.t) passed on or stopped through in a function run on another goroutine (Eventually, EventuallyWithT, Never, go, Go, Parallel)",
	Run:       run,
	FactTypes: []analysis.Fact{new(usesHandle)},
}

// usesHandle marks a method that passes on, or stops through, a test handle
// kept in a field of its receiver: calling it is passing the handle.
type usesHandle struct{}

func (*usesHandle) AFact()         {}
func (*usesHandle) String() string { return "usesHandle" }

// runsElsewhere names the calls that run a function they are given on a
// goroutine of their own.
var runsElsewhere = map[string]bool{
	"Eventually": true, "Eventuallyf": true, "EventuallyWithT": true, "EventuallyWithTf": true,
	"Never": true, "Neverf": true, "Consistently": true, "Consistentlyf": true,
	"Go": true, "Parallel": true, "RunParallel": true,
}

// stops are the handle's methods that end the calling goroutine.
var stops = map[string]bool{"Fatal": true, "Fatalf": true, "FailNow": true, "Skip": true, "Skipf": true, "SkipNow": true}

func run(pass *analysis.Pass) (any, error) {
	exportFacts(pass)
	for _, f := range pass.Files {
		if !inScope(pass, f) {
			continue
		}
		c := &checker{pass: pass, closures: closuresOf(pass, f), reported: map[token.Pos]bool{}}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				c.goroutine(n.Call.Fun, "go")
				for _, a := range n.Call.Args {
					if h := c.handle(a, nil); h != "" {
						c.report(a.Pos(), "%s is passed to a goroutine (go): report on a handle of its own or return an error", h)
					}
				}
			case *ast.CallExpr:
				if name := calleeName(n.Fun); runsElsewhere[name] {
					for _, a := range n.Args {
						c.goroutine(a, name)
					}
				}
			}
			return true
		})
	}
	return nil, nil
}

// inScope: tests, and the harness packages they share (internal/testenv).
func inScope(pass *analysis.Pass, f *ast.File) bool {
	name := pass.Fset.File(f.Pos()).Name()
	return strings.HasSuffix(name, "_test.go") || strings.Contains(pass.Pkg.Path(), "/testenv")
}

type checker struct {
	pass     *analysis.Pass
	closures map[types.Object]*ast.FuncLit
	seen     map[*ast.FuncLit]bool
	// reported keeps a closure run from two places from being reported twice.
	reported map[token.Pos]bool
}

func (c *checker) report(pos token.Pos, format string, args ...any) {
	if !c.reported[pos] {
		c.reported[pos] = true
		c.pass.Reportf(pos, format, args...)
	}
}

// goroutine checks a function run by `by` on another goroutine: a literal,
// or a local variable that holds one.
func (c *checker) goroutine(fn ast.Expr, by string) {
	lit, ok := ast.Unparen(fn).(*ast.FuncLit)
	if !ok {
		if id, isIdent := ast.Unparen(fn).(*ast.Ident); isIdent {
			lit = c.closures[c.pass.TypesInfo.Uses[id]]
		}
	}
	if lit == nil {
		return
	}
	c.seen = map[*ast.FuncLit]bool{}
	c.body(lit, by)
}

// body reports what lit does with a handle declared outside it, and
// follows the local closures it calls.
func (c *checker) body(lit *ast.FuncLit, by string) {
	if c.seen[lit] {
		return
	}
	c.seen[lit] = true
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		if cl, isLit := n.(*ast.CompositeLit); isLit {
			c.stored(cl, lit, by)
			return true
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if calleeName(call.Fun) == "Cleanup" {
			return false // a cleanup runs on the test goroutine, after the test
		}
		for _, a := range call.Args {
			if h := c.handle(a, lit); h != "" {
				c.report(a.Pos(), "%s is passed on in a function run by %s on another goroutine, where FailNow cannot stop the test: report on the function's own handle (*assert.CollectT) or return an error", h, by)
			}
		}
		switch fun := ast.Unparen(call.Fun).(type) {
		case *ast.SelectorExpr:
			if h := c.handle(fun.X, lit); h != "" && stops[fun.Sel.Name] {
				c.report(call.Pos(), "%s.%s in a function run by %s on another goroutine ends only that goroutine: report on the function's own handle or return an error", h, fun.Sel.Name, by)
			}
			if m, isFunc := c.pass.TypesInfo.Uses[fun.Sel].(*types.Func); isFunc && c.pass.ImportObjectFact(m, new(usesHandle)) && c.captured(fun.X, lit) {
				c.report(call.Pos(), "%s uses the test's handle (a field of its receiver) in a function run by %s on another goroutine: call a variant that returns an error", types.ExprString(fun), by)
			}
		case *ast.Ident:
			if inner := c.closures[c.pass.TypesInfo.Uses[fun]]; inner != nil {
				c.body(inner, by)
			}
		}
		return true
	})
}

// stored reports a handle declared outside lit that a composite literal
// in it holds (workload{t: t}): whatever the value's methods then do with
// it, they do off the test goroutine.
func (c *checker) stored(cl *ast.CompositeLit, lit *ast.FuncLit, by string) {
	for _, elt := range cl.Elts {
		if kv, isKV := elt.(*ast.KeyValueExpr); isKV {
			elt = kv.Value
		}
		if h := c.handle(elt, lit); h != "" {
			c.report(elt.Pos(), "%s is stored in a composite literal in a function run by %s on another goroutine, where FailNow cannot stop the test: give the value a handle of its own or have it return errors", h, by)
		}
	}
}

// handle names e if it is a test handle declared outside lit (any handle
// when lit is nil): a variable such as t or b, or a field such as s.t.
func (c *checker) handle(e ast.Expr, lit *ast.FuncLit) string {
	e = ast.Unparen(e)
	if !isHandleType(c.pass.TypesInfo.TypeOf(e)) {
		return ""
	}
	switch e := e.(type) {
	case *ast.Ident:
		if obj := c.pass.TypesInfo.Uses[e]; obj != nil && (lit == nil || outside(obj.Pos(), lit)) {
			return e.Name
		}
	case *ast.SelectorExpr:
		if sel := c.pass.TypesInfo.Selections[e]; sel != nil && sel.Kind() == types.FieldVal && (lit == nil || c.captured(e.X, lit)) {
			return types.ExprString(e)
		}
	}
	return ""
}

// captured: e's root variable is declared outside lit.
func (c *checker) captured(e ast.Expr, lit *ast.FuncLit) bool {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.SelectorExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.Ident:
			obj := c.pass.TypesInfo.Uses[x]
			return obj != nil && outside(obj.Pos(), lit)
		default:
			return false
		}
	}
}

func outside(pos token.Pos, lit *ast.FuncLit) bool { return pos < lit.Pos() || pos >= lit.End() }

// closuresOf maps each variable of f that is given a function literal
// (`check := func() {…}`) to that literal.
func closuresOf(pass *analysis.Pass, f *ast.File) map[types.Object]*ast.FuncLit {
	m := map[types.Object]*ast.FuncLit{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, rhs := range n.Rhs {
				if lit, ok := rhs.(*ast.FuncLit); ok && i < len(n.Lhs) {
					if id, isIdent := n.Lhs[i].(*ast.Ident); isIdent {
						if obj := pass.TypesInfo.ObjectOf(id); obj != nil {
							m[obj] = lit
						}
					}
				}
			}
		case *ast.ValueSpec:
			for i, v := range n.Values {
				if lit, ok := v.(*ast.FuncLit); ok && i < len(n.Names) {
					m[pass.TypesInfo.ObjectOf(n.Names[i])] = lit
				}
			}
		}
		return true
	})
	return m
}

// exportFacts marks the methods of this package that pass on or stop
// through a handle held in their receiver, directly or through another
// such method on the same receiver (to a fixed point).
func exportFacts(pass *analysis.Pass) {
	type method struct {
		decl *ast.FuncDecl
		recv types.Object
		fn   *types.Func
	}
	var methods []method
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 || len(fd.Recv.List[0].Names) != 1 || fd.Body == nil {
				continue
			}
			if fn, isFunc := pass.TypesInfo.Defs[fd.Name].(*types.Func); isFunc {
				methods = append(methods, method{fd, pass.TypesInfo.Defs[fd.Recv.List[0].Names[0]], fn})
			}
		}
	}
	marked := map[*types.Func]bool{}
	for changed := true; changed; {
		changed = false
		for _, m := range methods {
			if marked[m.fn] || m.recv == nil {
				continue
			}
			if usesReceiverHandle(pass, m.decl.Body, m.recv, marked) {
				marked[m.fn] = true
				changed = true
				pass.ExportObjectFact(m.fn, new(usesHandle))
			}
		}
	}
}

func usesReceiverHandle(pass *analysis.Pass, body *ast.BlockStmt, recv types.Object, marked map[*types.Func]bool) bool {
	isRecvField := func(e ast.Expr) bool {
		sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
		if !ok || !isHandleType(pass.TypesInfo.TypeOf(sel)) {
			return false
		}
		id, isIdent := ast.Unparen(sel.X).(*ast.Ident)
		return isIdent && pass.TypesInfo.Uses[id] == recv
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		if calleeName(call.Fun) == "Cleanup" {
			return false // a cleanup runs on the test goroutine, after the test
		}
		for _, a := range call.Args {
			found = found || isRecvField(a)
		}
		if fun, isSel := ast.Unparen(call.Fun).(*ast.SelectorExpr); isSel {
			found = found || (isRecvField(fun.X) && stops[fun.Sel.Name])
			if id, isIdent := ast.Unparen(fun.X).(*ast.Ident); isIdent && pass.TypesInfo.Uses[id] == recv {
				m, isFunc := pass.TypesInfo.Uses[fun.Sel].(*types.Func)
				found = found || (isFunc && marked[m])
			}
		}
		return !found
	})
	return found
}

// isHandleType: *testing.T, *testing.B, *testing.F or testing.TB.
func isHandleType(t types.Type) bool {
	if t == nil {
		return false
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "testing" {
		return false
	}
	switch n.Obj().Name() {
	case "T", "B", "F", "TB":
		return true
	}
	return false
}

// calleeName is the name a call is made by: F of pkg.F, x.F or F.
func calleeName(fun ast.Expr) string {
	switch f := ast.Unparen(fun).(type) {
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.Ident:
		return f.Name
	case *ast.IndexExpr:
		return calleeName(f.X)
	}
	return ""
}
