package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// kind is what a node matches.
type kind uint8

const (
	kindAnyOf   kind = iota // one of alts
	kindObject              // '{' ... '}'
	kindArray               // '[' ... ']'
	kindString              // '"' ... '"'
	kindNumber              // a JSON number
	kindInteger             // a JSON number without fraction or exponent
	kindLiteral             // one of lits, byte for byte
	kindRoot                // the whole output: alts[0], then nothing
)

// freeKey reads the key of an object without declared properties.
var freeKey = &node{id: -1, kind: kindString, maxItems: -1, maxLen: -1}

// Limits that keep the automaton's state small and a random model's
// output finite.
const (
	maxProps    = 64 // properties of one object: a bit each in a uint64
	maxLiterals = 64 // enum values of one node
	maxDigits   = 15 // digits of a number's integer part, fraction, or exponent
	// numberBound is what maxDigits keeps an integer part within: numbers
	// without exponent lie strictly inside ±numberBound.
	numberBound = 1e15
	maxNodes    = 4096
	maxDepth    = 64 // nesting of schema objects while compiling
)

// node is one compiled schema.
type node struct {
	id   int
	kind kind
	alts []*node // kindAnyOf

	// kindObject: declared properties (keys JSON-encoded, without quotes),
	// the bit set of required ones; with no properties, free keys whose
	// values are extra (nil: no free keys).
	props    []prop
	required uint64
	extra    *node

	items              *node // kindArray
	minItems, maxItems int   // maxItems < 0: no limit

	minLen, maxLen int // kindString, characters; maxLen < 0: no limit

	lits [][]byte // kindLiteral: canonical JSON texts

	noExp bool // kindNumber: no exponent (the schema bounds it)

	pattern *dfa // kindString: the pattern or format its characters follow
}

type prop struct {
	key  []byte
	node *node
}

// Grammar is a compiled constraint: the JSON texts it accepts.
type Grammar struct {
	root  *node
	nodes int
}

// SchemaError is a schema the compiler refuses; Path names the keyword at
// fault as a JSON pointer into the schema.
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return "schema: " + e.Msg
	}
	return "schema " + e.Path + ": " + e.Msg
}

// AnyJSON returns the grammar of any JSON object (OpenAI's json_object
// response format).
func AnyJSON() *Grammar {
	c := &compiler{}
	return &Grammar{root: c.anyObject(), nodes: c.n}
}

// Supported lists the JSON Schema keywords Compile understands; any other
// keyword (besides annotations such as title and description) is refused.
var Supported = []string{"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
	"enum", "const", "anyOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern", "format",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}

// annotations are keywords that do not constrain a value.
var annotations = []string{"title", "description", "$schema", "$id", "$comment", "default", "examples", "strict", "nullable"}

// Compile compiles a JSON schema (the subset of Supported) into a grammar.
// Objects accept their declared properties only, in the order the schema
// declares them (as llama.cpp's and xgrammar's grammars write them, so
// that a streaming reader meets them in that order), each at most once,
// the required ones present, whatever additionalProperties says: an
// output that uses fewer properties still validates.
func Compile(schema []byte) (*Grammar, error) {
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	order := map[unsafe.Pointer][]string{}
	root, err := decodeOrdered(d, order)
	if err != nil {
		return nil, &SchemaError{Msg: "not JSON: " + err.Error()}
	}
	c := &compiler{root: root, refs: map[string]*node{}, order: order}
	n, err := c.compile(root, "", 0)
	if err != nil {
		return nil, err
	}
	return &Grammar{root: n, nodes: c.n}, nil
}

type compiler struct {
	root any
	refs map[string]*node
	n    int
	any  *node
	// order is the keys of each object of the schema, as written.
	order map[unsafe.Pointer][]string
}

// ptr identifies an object of the schema, for its keys' order.
func ptr(m map[string]any) unsafe.Pointer { return reflect.ValueOf(m).UnsafePointer() }

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// decodeOrdered decodes the next JSON value of d into the types
// json.Unmarshal gives an any (numbers as json.Number), recording the
// keys of each object in the order written.
func decodeOrdered(d *json.Decoder, order map[unsafe.Pointer][]string) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		m := map[string]any{}
		var keys []string
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			v, err := decodeOrdered(d, order)
			if err != nil {
				return nil, err
			}
			if _, dup := m[key]; !dup {
				keys = append(keys, key)
			}
			m[key] = v
		}
		if _, err := d.Token(); err != nil {
			return nil, err
		}
		order[ptr(m)] = keys
		return m, nil
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := decodeOrdered(d, order)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := d.Token(); err != nil {
			return nil, err
		}
		return a, nil
	}
	return t, nil
}

func (c *compiler) newNode(k kind) (*node, error) {
	if c.n >= maxNodes {
		return nil, &SchemaError{Msg: fmt.Sprintf("more than %d schema nodes", maxNodes)}
	}
	c.n++
	return &node{id: c.n, kind: k, maxItems: -1, maxLen: -1}, nil
}

func (c *compiler) mustNode(k kind) *node {
	n, _ := c.newNode(k)
	return n
}

// anyValue is any JSON value; anyObject any JSON object.
func (c *compiler) anyValue() *node {
	if c.any != nil {
		return c.any
	}
	a := c.mustNode(kindAnyOf)
	c.any = a
	obj := c.mustNode(kindObject)
	arr := c.mustNode(kindArray)
	obj.extra, arr.items = a, a
	a.alts = []*node{obj, arr, c.mustNode(kindString), c.mustNode(kindNumber),
		{id: c.bump(), kind: kindLiteral, lits: [][]byte{[]byte("true"), []byte("false"), []byte("null")}, maxItems: -1, maxLen: -1}}
	return a
}

func (c *compiler) bump() int { c.n++; return c.n }

func (c *compiler) anyObject() *node { return c.anyValue().alts[0] }

func (c *compiler) compile(v any, path string, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("nested deeper than %d", maxDepth)}
	}
	switch s := v.(type) {
	case bool:
		if s {
			return c.anyValue(), nil
		}
		return nil, &SchemaError{Path: path, Msg: "the schema false accepts nothing"}
	case map[string]any:
		return c.object(s, path, depth)
	}
	return nil, &SchemaError{Path: path, Msg: "a schema must be an object or a boolean"}
}

func (c *compiler) object(s map[string]any, path string, depth int) (*node, error) {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(Supported, k) && !slices.Contains(annotations, k) {
			return nil, &SchemaError{Path: path + "/" + k, Msg: fmt.Sprintf("the keyword %q is not supported (supported: %s)", k, strings.Join(Supported, ", "))}
		}
	}
	if _, ok := s["allOf"]; ok {
		merged, err := c.allOf(s, path, depth)
		if err != nil {
			return nil, err
		}
		return c.object(merged, path, depth)
	}
	if ref, ok := s["$ref"]; ok {
		if len(s) > 1 && !onlyAnnotations(s, "$ref", "$defs", "definitions") {
			return nil, &SchemaError{Path: path + "/$ref", Msg: "$ref with other constraining keywords is not supported"}
		}
		r, ok := ref.(string)
		if !ok {
			return nil, &SchemaError{Path: path + "/$ref", Msg: "must be a string"}
		}
		return c.ref(r, path+"/$ref", depth)
	}
	if e, ok := s["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return nil, &SchemaError{Path: path + "/enum", Msg: "must be a non-empty array"}
		}
		return c.typedLiterals(s, list, path+"/enum")
	}
	if e, ok := s["const"]; ok {
		return c.typedLiterals(s, []any{e}, path+"/const")
	}
	if a, ok := s["anyOf"]; ok {
		list, ok := a.([]any)
		if !ok || len(list) == 0 {
			return nil, &SchemaError{Path: path + "/anyOf", Msg: "must be a non-empty array"}
		}
		if _, ok := s["type"]; ok {
			return nil, &SchemaError{Path: path + "/anyOf", Msg: "anyOf beside type is not supported: put the type inside each branch"}
		}
		n, err := c.newNode(kindAnyOf)
		if err != nil {
			return nil, err
		}
		for i, b := range list {
			alt, err := c.compile(b, fmt.Sprintf("%s/anyOf/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			n.alts = append(n.alts, alt)
		}
		return n, nil
	}
	t, ok := s["type"]
	if !ok {
		if _, ok := s["properties"]; ok {
			t = "object"
		} else {
			return c.anyValue(), nil
		}
	}
	switch t := t.(type) {
	case string:
		return c.typed(t, s, path, depth)
	case []any:
		n, err := c.newNode(kindAnyOf)
		if err != nil {
			return nil, err
		}
		for i, e := range t {
			name, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Path: fmt.Sprintf("%s/type/%d", path, i), Msg: "must be a string"}
			}
			alt, err := c.typed(name, s, path, depth)
			if err != nil {
				return nil, err
			}
			n.alts = append(n.alts, alt)
		}
		return n, nil
	}
	return nil, &SchemaError{Path: path + "/type", Msg: "must be a string or an array of strings"}
}

func onlyAnnotations(s map[string]any, allowed ...string) bool {
	for k := range s {
		if !slices.Contains(allowed, k) && !slices.Contains(annotations, k) {
			return false
		}
	}
	return true
}

// typed compiles s as type t; keywords of other types are refused.
func (c *compiler) typed(t string, s map[string]any, path string, depth int) (*node, error) {
	allowed := map[string][]string{
		"object":  {"properties", "required", "additionalProperties"},
		"array":   {"items", "minItems", "maxItems"},
		"string":  {"minLength", "maxLength", "pattern", "format"},
		"number":  {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
		"integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
		"boolean": nil,
		"null":    nil,
	}
	own, ok := allowed[t]
	if !ok {
		return nil, &SchemaError{Path: path + "/type", Msg: fmt.Sprintf("unknown type %q", t)}
	}
	for k := range s {
		if k == "type" || k == "$defs" || k == "definitions" || slices.Contains(annotations, k) || slices.Contains(own, k) {
			continue
		}
		if _, multi := s["type"].([]any); multi { // other branches' keywords
			continue
		}
		return nil, &SchemaError{Path: path + "/" + k, Msg: fmt.Sprintf("does not apply to type %q", t)}
	}
	switch t {
	case "boolean":
		return c.literals([]any{true, false}, path)
	case "null":
		return c.literals([]any{nil}, path)
	case "number", "integer":
		k := kindNumber
		if t == "integer" {
			k = kindInteger
		}
		n, err := c.newNode(k)
		if err != nil {
			return nil, err
		}
		for _, b := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
			v, ok := s[b]
			if !ok {
				continue
			}
			num, _ := v.(json.Number)
			f, err := num.Float64()
			if err != nil || (strings.HasSuffix(b, "inimum") && f > -numberBound) || (strings.HasSuffix(b, "aximum") && f < numberBound) {
				return nil, &SchemaError{Path: path + "/" + b, Msg: fmt.Sprintf("only bounds beyond ±%g are supported (such as JavaScript's safe integers), got %v", numberBound, v)}
			}
			n.noExp = true
		}
		return n, nil
	case "string":
		n, err := c.newNode(kindString)
		if err != nil {
			return nil, err
		}
		if n.minLen, err = count(s, "minLength", 0, path); err != nil {
			return nil, err
		}
		if n.maxLen, err = count(s, "maxLength", -1, path); err != nil {
			return nil, err
		}
		if n.maxLen >= 0 && n.maxLen < n.minLen {
			return nil, &SchemaError{Path: path + "/maxLength", Msg: "is below minLength"}
		}
		if err := stringPattern(n, s, path); err != nil {
			return nil, err
		}
		return n, nil
	case "array":
		n, err := c.newNode(kindArray)
		if err != nil {
			return nil, err
		}
		if n.minItems, err = count(s, "minItems", 0, path); err != nil {
			return nil, err
		}
		if n.maxItems, err = count(s, "maxItems", -1, path); err != nil {
			return nil, err
		}
		if n.maxItems >= 0 && n.maxItems < n.minItems {
			return nil, &SchemaError{Path: path + "/maxItems", Msg: "is below minItems"}
		}
		n.items = c.anyValue()
		if it, ok := s["items"]; ok {
			if n.items, err = c.compile(it, path+"/items", depth+1); err != nil {
				return nil, err
			}
		}
		return n, nil
	}
	return c.objectType(s, path, depth)
}

func (c *compiler) objectType(s map[string]any, path string, depth int) (*node, error) {
	n, err := c.newNode(kindObject)
	if err != nil {
		return nil, err
	}
	props, _ := s["properties"].(map[string]any)
	if p, ok := s["properties"]; ok && props == nil {
		return nil, &SchemaError{Path: path + "/properties", Msg: fmt.Sprintf("must be an object, got %v", p)}
	}
	if len(props) > maxProps {
		return nil, &SchemaError{Path: path + "/properties", Msg: fmt.Sprintf("has %d properties, at most %d are supported", len(props), maxProps)}
	}
	names := c.order[ptr(props)]
	if len(names) != len(props) { // not decoded by Compile
		names = sortedKeys(props)
	}
	for _, k := range names {
		pn, err := c.compile(props[k], path+"/properties/"+pointerEscape(k), depth+1)
		if err != nil {
			return nil, err
		}
		key, _ := json.Marshal(k)
		n.props = append(n.props, prop{key: key[1 : len(key)-1], node: pn})
	}
	if r, ok := s["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return nil, &SchemaError{Path: path + "/required", Msg: "must be an array of strings"}
		}
		for i, e := range list {
			name, _ := e.(string)
			j := slices.Index(names, name)
			if j < 0 {
				return nil, &SchemaError{Path: fmt.Sprintf("%s/required/%d", path, i), Msg: fmt.Sprintf("%q is not among the properties", name)}
			}
			n.required |= 1 << j
		}
	}
	if len(names) == 0 {
		switch ap := s["additionalProperties"].(type) {
		case nil:
			n.extra = c.anyValue()
		case bool:
			if ap {
				n.extra = c.anyValue()
			}
		default:
			if n.extra, err = c.compile(ap, path+"/additionalProperties", depth+1); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// count reads a non-negative integer keyword; def when absent.
func count(s map[string]any, k string, def int, path string) (int, error) {
	v, ok := s[k]
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	if ok {
		if i, err := num.Int64(); err == nil && i >= 0 && i <= 1<<20 {
			return int(i), nil
		}
	}
	return 0, &SchemaError{Path: path + "/" + k, Msg: "must be an integer from 0 to 1048576"}
}

// typedLiterals compiles enum or const values, keeping those of the
// schema's type when it has one.
func (c *compiler) typedLiterals(s map[string]any, vals []any, path string) (*node, error) {
	var types []string
	switch t := s["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, e := range t {
			if name, ok := e.(string); ok {
				types = append(types, name)
			}
		}
	}
	if types == nil {
		return c.literals(vals, path)
	}
	var kept []any
	for _, v := range vals {
		if slices.Contains(types, jsonType(v)) || jsonType(v) == "integer" && slices.Contains(types, "number") {
			kept = append(kept, v)
		}
	}
	if len(kept) == 0 {
		return nil, &SchemaError{Path: path, Msg: "no value is of the schema's type"}
	}
	return c.literals(kept, path)
}

// jsonType names the JSON Schema type of a decoded value.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "number"
		}
		return "integer"
	}
	return ""
}

// literals compiles enum values to their canonical JSON texts.
func (c *compiler) literals(vals []any, path string) (*node, error) {
	if len(vals) > maxLiterals {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("has %d values, at most %d are supported", len(vals), maxLiterals)}
	}
	n, err := c.newNode(kindLiteral)
	if err != nil {
		return nil, err
	}
	for _, v := range vals {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, &SchemaError{Path: path, Msg: err.Error()}
		}
		if !slices.ContainsFunc(n.lits, func(l []byte) bool { return bytes.Equal(l, b) }) {
			n.lits = append(n.lits, b)
		}
	}
	return n, nil
}

// ref resolves a local reference: #, #/$defs/name, #/definitions/name.
// resolve returns the schema the local reference r points at.
func (c *compiler) resolve(r, path string) (any, error) {
	if !strings.HasPrefix(r, "#") {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("only local references (#/$defs/...) are supported, got %q", r)}
	}
	target := c.root
	if r != "#" {
		for _, part := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			var ok bool
			switch x := target.(type) {
			case map[string]any:
				target, ok = x[part]
			case []any:
				i, err := strconv.Atoi(part)
				if ok = err == nil && i >= 0 && i < len(x); ok {
					target = x[i]
				}
			}
			if !ok {
				return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("%q does not resolve", r)}
			}
		}
	}
	return target, nil
}

func (c *compiler) ref(r, path string, depth int) (*node, error) {
	if n, ok := c.refs[r]; ok {
		return n, nil
	}
	target, err := c.resolve(r, path)
	if err != nil {
		return nil, err
	}
	// A placeholder breaks cycles: the reference resolves to an anyOf of
	// one branch, filled once the target is compiled.
	ph, err := c.newNode(kindAnyOf)
	if err != nil {
		return nil, err
	}
	c.refs[r] = ph
	n, err := c.compile(target, path, depth+1)
	if err != nil {
		return nil, err
	}
	ph.alts = []*node{n}
	return ph, nil
}
