package layout

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Limits of a non-test Go file and function (docs/architecture.md, "Size").
const (
	maxFileLines = 900
	maxFuncLines = 100
	// A composite literal or string literal of at least this many lines is a table or an SQL
	// text: its lines do not count towards its function's size.
	literalLines = 5
)

type listed struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// packages lists every package of the module with its imports, through go list.
func packages(t *testing.T) []listed {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test runs go list")
	}
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,Imports,TestImports,XTestImports", Module+"/...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var ps []listed
	for dec := json.NewDecoder(&out); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 10 {
		t.Fatalf("go list found %d packages; the module has more", len(ps))
	}
	return ps
}

// TestImportRule fails on an import, in code or in tests, that runs upward: a shared package
// that imports a binary's, a binary's package that imports a package of a room after its own
// (the store's of HQ's, the till's of the store's), or anything below the top that imports
// e2e/ or demo/.
func TestImportRule(t *testing.T) {
	for _, p := range packages(t) {
		if RoomOf(p.ImportPath) == Outside {
			t.Errorf("%s is in no room of the rule: add its top directory to RoomOf", p.ImportPath)
		}
		check := func(imps []string, allowed func(from, to string) bool, what string) {
			for _, imp := range imps {
				if imp != p.ImportPath && !allowed(p.ImportPath, imp) {
					t.Errorf("import %s -> %s%s: a %s package may not import a %s one",
						strings.TrimPrefix(p.ImportPath, Module+"/"), strings.TrimPrefix(imp, Module+"/"), what,
						RoomOf(p.ImportPath), RoomOf(imp))
				}
			}
		}
		check(p.Imports, Allowed, "")
		check(p.TestImports, AllowedInTest, " (in a test)")
		check(p.XTestImports, AllowedInTest, " (in a test)")
	}
}

// TestAllowed pins the rule's table, so that a change to it is a change to this test too.
func TestAllowed(t *testing.T) {
	m := Module + "/"
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{m + "internal/wire", m + "internal/money", true},
		{m + "internal/wire", m + "store-server/ledger", false},
		{m + "schema", m + "terminal-agent/outbox", false},
		{m + "terminal-agent/api", m + "terminal-agent/client", true},
		{m + "terminal-agent/uplink", m + "store-server/broker", false},
		{m + "store-server/api", m + "store-server/ledger", true},
		{m + "store-server/api", m + "hq-sync/upload", false},
		{m + "store-server/ledger", m + "hq-sync/hqstore", false},
		{m + "store-server/ledger", m + "internal/hqwire", true},
		{m + "hq-sync/upload", m + "store-server/ledger", true},
		{m + "store-server", m + "e2e", false},
		{m + "hq-sync", m + "e2e", false},
		{m + "hq-sync/reconcile", m + "demo", false},
		{m + "internal/stack", m + "e2e", false},
		{m + "e2e", m + "store-server/client", true},
		{m + "demo", m + "e2e", true},
		{m + "store-server/gate", "github.com/redis/go-redis/v9", true},
	} {
		if got := Allowed(c.from, c.to); got != c.want {
			t.Errorf("Allowed(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{m + "store-server", m + "e2e", true},
		{m + "internal/stack", m + "e2e", true},
		{m + "store-server", m + "demo", false},
		{m + "store-server/api", m + "hq-sync/serve", false},
		{m + "terminal-agent/uplink", m + "store-server/broker", false},
	} {
		if got := AllowedInTest(c.from, c.to); got != c.want {
			t.Errorf("AllowedInTest(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestSizes fails on a non-test Go file over maxFileLines lines and on a non-test function
// over maxFuncLines lines, tables and SQL texts aside: a file or function that large holds
// several jobs.
func TestSizes(t *testing.T) {
	for _, p := range packages(t) {
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel := strings.TrimPrefix(p.ImportPath+"/"+name, Module+"/")
			if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
				t.Errorf("size %s: %d lines, over %d", rel, n, maxFileLines)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if n := codeLines(fset, fn); n > maxFuncLines {
					t.Errorf("size %s: func %s: %d lines of code, over %d", rel, funcName(fn), n, maxFuncLines)
				}
			}
		}
	}
}

// codeLines counts the lines of fn, less those of the tables and texts within it: composite
// literals and string literals of at least literalLines lines (outermost only).
func codeLines(fset *token.FileSet, fn *ast.FuncDecl) int {
	lines := func(n ast.Node) int { return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1 }
	n := lines(fn)
	ast.Inspect(fn.Body, func(x ast.Node) bool {
		switch x.(type) {
		case *ast.CompositeLit, *ast.BasicLit:
			if l := lines(x); l >= literalLines {
				n -= l
				return false
			}
		}
		return true
	})
	return n
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	var b strings.Builder
	var recv func(ast.Expr)
	recv = func(e ast.Expr) {
		switch e := e.(type) {
		case *ast.StarExpr:
			recv(e.X)
		case *ast.IndexExpr:
			recv(e.X)
		case *ast.Ident:
			b.WriteString(e.Name)
		}
	}
	recv(fn.Recv.List[0].Type)
	return b.String() + "." + fn.Name.Name
}
