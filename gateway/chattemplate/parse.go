package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
)

// Nodes of a parsed template.
type (
	node any

	textNode   struct{ s string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		orElse []node
	}
	forNode struct {
		vars   []string
		iter   expr
		filter expr // {% for x in xs if cond %}, or nil
		body   []node
		orElse []node
	}
	setNode struct {
		name, attr string // attr: {% set ns.attr = ... %}
		value      expr
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // nil where a parameter has none
		body     []node
	}
	loopCtlNode struct{ brk bool }
)

// Expressions.
type (
	expr any

	literal  struct{ v any }
	name     struct{ n string }
	listExpr struct{ items []expr }
	dictExpr struct{ keys, vals []expr }
	attr     struct {
		obj expr
		n   string
	}
	index struct{ obj, idx expr }
	slice struct {
		obj              expr
		start, end, step expr // nil when left out
	}
	call struct {
		fn     expr
		args   []expr
		kwargs map[string]expr
		kwords []string
	}
	filter struct {
		arg    expr
		n      string
		args   []expr
		kwargs map[string]expr
	}
	test struct {
		arg    expr
		n      string
		args   []expr
		negate bool
	}
	unary struct {
		op string
		x  expr
	}
	binary struct {
		op   string
		l, r expr
	}
	cond struct{ test, yes, no expr }
)

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.peek().pos, fmt.Sprintf(format, args...))
}

func (p *parser) isOp(op string) bool  { t := p.peek(); return t.kind == tOp && t.val == op }
func (p *parser) isName(n string) bool { t := p.peek(); return t.kind == tName && t.val == n }
func (p *parser) acceptOp(op string) bool {
	if p.isOp(op) {
		p.i++
		return true
	}
	return false
}
func (p *parser) acceptName(n string) bool {
	if p.isName(n) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.acceptOp(op) {
		return p.errorf("expected %q, found %q", op, p.peek().val)
	}
	return nil
}

func (p *parser) expectKind(k tokKind, what string) (token, error) {
	if p.peek().kind != k {
		return token{}, p.errorf("expected %s, found %q", what, p.peek().val)
	}
	return p.next(), nil
}

func (p *parser) ident() (string, error) {
	t, err := p.expectKind(tName, "a name")
	return t.val, err
}

// body parses nodes up to a {% tag %} whose first word is in ends (which
// it leaves unread, after its {%), or to the end when ends is empty.
func (p *parser) body(ends ...string) ([]node, string, error) {
	var nodes []node
	for {
		t := p.peek()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.errorf("missing {%% %s %%}", ends[len(ends)-1])
			}
			return nodes, "", nil
		case tText:
			p.next()
			nodes = append(nodes, &textNode{t.val})
		case tExprOpen:
			p.next()
			e, err := p.expr()
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tExprClose, "}}"); err != nil {
				return nil, "", err
			}
			nodes = append(nodes, &outputNode{e})
		case tStmtOpen:
			p.next()
			kw := p.peek()
			if kw.kind != tName {
				return nil, "", p.errorf("expected a statement, found %q", kw.val)
			}
			for _, e := range ends {
				if kw.val == e {
					p.next()
					return nodes, e, nil
				}
			}
			n, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			nodes = append(nodes, n)
		default:
			return nil, "", p.errorf("unexpected %q", t.val)
		}
	}
}

func (p *parser) closeStmt() error {
	_, err := p.expectKind(tStmtClose, "%}")
	return err
}

func (p *parser) statement() (node, error) {
	kw := p.next().val
	switch kw {
	case "if":
		return p.ifStmt()
	case "for":
		return p.forStmt()
	case "set":
		return p.setStmt()
	case "macro":
		return p.macroStmt()
	case "break", "continue":
		return &loopCtlNode{brk: kw == "break"}, p.closeStmt()
	}
	return nil, fmt.Errorf("unsupported statement {%% %s %%}", kw)
}

func (p *parser) ifStmt() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.closeStmt(); err != nil {
			return nil, err
		}
		body, end, err := p.body("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, c), append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.closeStmt(); err != nil {
				return nil, err
			}
			if n.orElse, _, err = p.body("endif"); err != nil {
				return nil, err
			}
		}
		return n, p.closeStmt()
	}
}

func (p *parser) forStmt() (node, error) {
	n := &forNode{}
	for {
		v, err := p.ident()
		if err != nil {
			return nil, err
		}
		n.vars = append(n.vars, v)
		if !p.acceptOp(",") {
			break
		}
	}
	if !p.acceptName("in") {
		return nil, p.errorf("expected 'in' in {%% for %%}")
	}
	var err error
	if n.iter, err = p.ternaryFree(); err != nil {
		return nil, err
	}
	if p.acceptName("if") {
		if n.filter, err = p.ternaryFree(); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf("unsupported: recursive loops")
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	var end string
	if n.body, end, err = p.body("else", "endfor"); err != nil {
		return nil, err
	}
	if end == "else" {
		if err := p.closeStmt(); err != nil {
			return nil, err
		}
		if n.orElse, _, err = p.body("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.closeStmt()
}

func (p *parser) setStmt() (node, error) {
	n := &setNode{}
	var err error
	if n.name, err = p.ident(); err != nil {
		return nil, err
	}
	if p.acceptOp(".") {
		if n.attr, err = p.ident(); err != nil {
			return nil, err
		}
	}
	if !p.acceptOp("=") {
		return nil, p.errorf("unsupported: {%% set %%} blocks and multiple targets")
	}
	if n.value, err = p.expr(); err != nil {
		return nil, err
	}
	return n, p.closeStmt()
}

func (p *parser) macroStmt() (node, error) {
	n := &macroNode{}
	var err error
	if n.name, err = p.ident(); err != nil {
		return nil, err
	}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.acceptOp(")") {
		prm, err := p.ident()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.acceptOp("=") {
			if def, err = p.expr(); err != nil {
				return nil, err
			}
		}
		n.params, n.defaults = append(n.params, prm), append(n.defaults, def)
		if !p.acceptOp(",") && !p.isOp(")") {
			return nil, p.errorf("expected ',' or ')' in macro parameters")
		}
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.body("endmacro"); err != nil {
		return nil, err
	}
	return n, p.closeStmt()
}

// expr parses an expression, conditional expressions included.
func (p *parser) expr() (expr, error) {
	yes, err := p.or()
	if err != nil {
		return nil, err
	}
	if !p.acceptName("if") {
		return yes, nil
	}
	c := &cond{yes: yes, no: &literal{undefined{}}}
	if c.test, err = p.or(); err != nil {
		return nil, err
	}
	if p.acceptName("else") {
		if c.no, err = p.expr(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ternaryFree parses an expression without a trailing "if" (for loops).
func (p *parser) ternaryFree() (expr, error) { return p.or() }

func (p *parser) or() (expr, error) {
	l, err := p.and()
	for err == nil && p.acceptName("or") {
		var r expr
		r, err = p.and()
		l = &binary{"or", l, r}
	}
	return l, err
}

func (p *parser) and() (expr, error) {
	l, err := p.not()
	for err == nil && p.acceptName("and") {
		var r expr
		r, err = p.not()
		l = &binary{"and", l, r}
	}
	return l, err
}

func (p *parser) not() (expr, error) {
	if p.acceptName("not") {
		x, err := p.not()
		return &unary{"not", x}, err
	}
	return p.compare()
}

func (p *parser) compare() (expr, error) {
	l, err := p.concat()
	for err == nil {
		var op string
		switch t := p.peek(); {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.toks[p.i+1].kind == tName && p.toks[p.i+1].val == "in":
			op = "not in"
			p.i += 2
		default:
			return l, nil
		}
		var r expr
		r, err = p.concat()
		l = &binary{op, l, r}
	}
	return l, err
}

func (p *parser) concat() (expr, error) {
	l, err := p.sum()
	for err == nil && p.acceptOp("~") {
		var r expr
		r, err = p.sum()
		l = &binary{"~", l, r}
	}
	return l, err
}

func (p *parser) sum() (expr, error) {
	l, err := p.product()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().val
		var r expr
		r, err = p.product()
		l = &binary{op, l, r}
	}
	return l, err
}

func (p *parser) product() (expr, error) {
	l, err := p.power()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().val
		var r expr
		r, err = p.power()
		l = &binary{op, l, r}
	}
	return l, err
}

func (p *parser) power() (expr, error) {
	l, err := p.unary()
	for err == nil && p.acceptOp("**") {
		var r expr
		r, err = p.unary()
		l = &binary{"**", l, r}
	}
	return l, err
}

func (p *parser) unary() (expr, error) {
	if p.isOp("-") || p.isOp("+") {
		op := p.next().val
		x, err := p.unary()
		return &unary{op, x}, err
	}
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	return p.postfix(x)
}

// postfix parses attribute access, subscripts, calls, filters and tests.
func (p *parser) postfix(x expr) (expr, error) {
	for {
		switch {
		case p.acceptOp("."):
			n, err := p.ident()
			if err != nil {
				return nil, err
			}
			x = &attr{x, n}
		case p.acceptOp("["):
			s, err := p.subscript(x)
			if err != nil {
				return nil, err
			}
			x = s
		case p.acceptOp("("):
			c := &call{fn: x}
			if err := p.args(&c.args, &c.kwargs, &c.kwords); err != nil {
				return nil, err
			}
			x = c
		case p.acceptOp("|"):
			n, err := p.ident()
			if err != nil {
				return nil, err
			}
			f := &filter{arg: x, n: n}
			if p.acceptOp("(") {
				if err := p.args(&f.args, &f.kwargs, nil); err != nil {
					return nil, err
				}
			}
			x = f
		case p.acceptName("is"):
			t := &test{arg: x, negate: p.acceptName("not")}
			n, err := p.expectKind(tName, "a test name")
			if err != nil {
				return nil, err
			}
			t.n = n.val
			if p.acceptOp("(") {
				if err := p.args(&t.args, nil, nil); err != nil {
					return nil, err
				}
			} else if k := p.peek().kind; k == tString || k == tInt || k == tFloat {
				a, err := p.primary()
				if err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			x = t
		default:
			return x, nil
		}
	}
}

// subscript parses what follows '[': an index or a slice.
func (p *parser) subscript(obj expr) (expr, error) {
	var parts [3]expr
	colons := 0
	for {
		if p.acceptOp("]") {
			break
		}
		if p.acceptOp(":") {
			colons++
			if colons > 2 {
				return nil, p.errorf("too many ':' in a slice")
			}
			continue
		}
		if parts[colons] != nil {
			return nil, p.errorf("expected ':' or ']'")
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		parts[colons] = e
	}
	if colons == 0 {
		if parts[0] == nil {
			return nil, p.errorf("empty subscript")
		}
		return &index{obj, parts[0]}, nil
	}
	return &slice{obj, parts[0], parts[1], parts[2]}, nil
}

// args parses call arguments after '(' through ')'.
func (p *parser) args(args *[]expr, kwargs *map[string]expr, order *[]string) error {
	for !p.acceptOp(")") {
		if p.peek().kind == tName && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].val == "=" {
			if kwargs == nil {
				return p.errorf("unexpected keyword argument")
			}
			k := p.next().val
			p.next()
			v, err := p.expr()
			if err != nil {
				return err
			}
			if *kwargs == nil {
				*kwargs = map[string]expr{}
			}
			(*kwargs)[k] = v
			if order != nil {
				*order = append(*order, k)
			}
		} else {
			v, err := p.expr()
			if err != nil {
				return err
			}
			*args = append(*args, v)
		}
		if !p.acceptOp(",") && !p.isOp(")") {
			return p.errorf("expected ',' or ')' in arguments, found %q", p.peek().val)
		}
	}
	return nil
}

func (p *parser) primary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tString:
		s := t.val
		for p.peek().kind == tString { // adjacent literals join
			s += p.next().val
		}
		return &literal{s}, nil
	case tInt:
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("at byte %d: integer %s: %v", t.pos, t.val, err)
		}
		return &literal{n}, nil
	case tFloat:
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, fmt.Errorf("at byte %d: number %s: %v", t.pos, t.val, err)
		}
		return &literal{f}, nil
	case tName:
		switch t.val {
		case "true", "True":
			return &literal{true}, nil
		case "false", "False":
			return &literal{false}, nil
		case "none", "None":
			return &literal{nil}, nil
		}
		return &name{t.val}, nil
	case tOp:
		switch t.val {
		case "(":
			var items []expr
			tuple := false
			for !p.acceptOp(")") {
				e, err := p.expr()
				if err != nil {
					return nil, err
				}
				items = append(items, e)
				if p.acceptOp(",") {
					tuple = true
				} else if !p.isOp(")") {
					return nil, p.errorf("expected ')'")
				}
			}
			if !tuple && len(items) == 1 {
				return items[0], nil
			}
			return &listExpr{items}, nil
		case "[":
			l := &listExpr{}
			for !p.acceptOp("]") {
				e, err := p.expr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
				if !p.acceptOp(",") && !p.isOp("]") {
					return nil, p.errorf("expected ',' or ']' in a list")
				}
			}
			return l, nil
		case "{":
			d := &dictExpr{}
			for !p.acceptOp("}") {
				k, err := p.expr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.expr()
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				if !p.acceptOp(",") && !p.isOp("}") {
					return nil, p.errorf("expected ',' or '}' in a dict")
				}
			}
			return d, nil
		}
	}
	if t.kind == tEOF {
		return nil, fmt.Errorf("unexpected end of template")
	}
	return nil, fmt.Errorf("at byte %d: unexpected %s", t.pos, strings.TrimSpace(strconv.Quote(t.val)))
}
