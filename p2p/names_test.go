package p2p_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/ibv"
	_ "github.com/rdmago/rdmago/verbs/loop"
)

// nameComparisons lists the places in a file's code that decide something
// by a provider's name: == or != against a registered provider's name or a
// provider package's *Name constant, a switch case on one, or a call such
// as slices.Contains or strings.EqualFold given one. Policy must come from
// verbs.Traits and CanConnect instead.
func nameComparisons(fset *token.FileSet, f *ast.File, names map[string]bool) []string {
	provPkgs := map[string]bool{} // local names of imported provider packages
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if rest, ok := strings.CutPrefix(path, "github.com/rdmago/rdmago/verbs/"); ok && !strings.Contains(rest, "/") {
			local := rest
			if imp.Name != nil {
				local = imp.Name.Name
			}
			provPkgs[local] = true
		}
	}
	isName := func(e ast.Expr) bool {
		switch e := ast.Unparen(e).(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			return e.Kind == token.STRING && err == nil && names[s]
		case *ast.SelectorExpr:
			x, ok := e.X.(*ast.Ident)
			return ok && provPkgs[x.Name] && strings.HasSuffix(e.Sel.Name, "Name")
		}
		return false
	}
	var found []string
	report := func(n ast.Node, what string) {
		found = append(found, fset.Position(n.Pos()).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isName(n.X) || isName(n.Y)) {
				report(n, "comparison with a provider name")
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if isName(e) {
					report(e, "switch case on a provider name")
				}
			}
		case *ast.CallExpr:
			var fn string
			switch f := n.Fun.(type) {
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			case *ast.Ident:
				fn = f.Name
			}
			switch fn {
			case "Contains", "Index", "EqualFold", "HasPrefix", "HasSuffix", "Compare":
				for _, a := range n.Args {
					if isName(a) {
						report(n, fn+" with a provider name")
					}
				}
			}
		}
		return true
	})
	return found
}

func providerNames() map[string]bool {
	names := map[string]bool{}
	for _, n := range verbs.Providers() {
		names[n] = true
	}
	return names
}

// The layers above verbs choose and tune transports from what providers
// say of themselves, never from their names, so that a new provider needs
// no edit there. This fails when a name comparison comes back into the
// code (not the tests) of p2p, collectives or comm.
func TestNoProviderNamesInPolicy(t *testing.T) {
	names := providerNames()
	require.Subset(t, verbs.Providers(), []string{"shm", "tcp", "ibv", "loop"})
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{".", "../collectives", "../comm"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			files++
			for _, c := range nameComparisons(fset, f, names) {
				t.Errorf("%s: decide from verbs.Traits or CanConnect instead", c)
			}
			return nil
		})
		require.NoError(t, err)
	}
	assert.Greater(t, files, 50, "the scan found the packages' sources")
}

// The scan itself finds each kind of name comparison and leaves other
// uses of the same strings alone.
func TestNameComparisonsScan(t *testing.T) {
	src := `package x
import (
	"net"
	"slices"
	"strings"
	tcpprov "github.com/rdmago/rdmago/verbs/tcp"
	"github.com/rdmago/rdmago/verbs/ibv"
)
func f(d dev, provs []string) int {
	if d.provider == "shm" { return 1 }
	if "tcp" != d.name { return 2 }
	switch d.provider {
	case "loop":
		return 3
	}
	if slices.Contains(provs, "ibv") { return 4 }
	if strings.EqualFold(d.provider, tcpprov.Name) { return 5 }
	if d.provider == ibv.ProviderName { return 6 }
	return 0
}
func g() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	p := "shm"
	opts := []string{"auto", "shm"}
	_, _, _ = ln, p, opts
	if err == ibv.ErrSomething { }
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	require.NoError(t, err)
	found := nameComparisons(fset, f, providerNames())
	want := []string{
		"x.go:10:5: comparison with a provider name",
		"x.go:11:5: comparison with a provider name",
		"x.go:13:7: switch case on a provider name",
		"x.go:16:5: Contains with a provider name",
		"x.go:17:5: EqualFold with a provider name",
		"x.go:18:5: comparison with a provider name",
	}
	assert.Equal(t, want, found)
}
