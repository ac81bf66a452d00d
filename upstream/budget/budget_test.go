package budget

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestBudget(t *testing.T) {
	b := New(100)
	if !b.Take(60) || b.Take(41) || !b.Take(40) {
		t.Fatal("takes up to the limit, and no further")
	}
	if b.Used() != 100 || b.Peak() != 100 {
		t.Fatalf("used %d peak %d", b.Used(), b.Peak())
	}
	b.Give(100)
	if b.Used() != 0 || b.Peak() != 100 || b.Limit() != 100 {
		t.Fatalf("used %d peak %d limit %d", b.Used(), b.Peak(), b.Limit())
	}
	var nilB *Budget
	if !nilB.Take(1 << 40) {
		t.Fatal("a nil budget is unlimited")
	}
	nilB.Give(1 << 40)
}

func TestBudgetConcurrent(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10000 {
				if b.Take(7) {
					if b.Used() > 1000 {
						t.Error("over the limit")
					}
					b.Give(7)
				}
			}
		})
	}
	wg.Wait()
	if b.Used() != 0 || b.Peak() > 1000 {
		t.Fatalf("used %d peak %d", b.Used(), b.Peak())
	}
}

func TestGiveTooMuchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	New(10).Give(1)
}

// TestLeaf: the package imports the standard library only, so that the
// gateway's packages can draw on it without importing the rest of
// upstream (see the package comment).
func TestLeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: budget must import the standard library only", name, path)
			}
		}
	}
}
