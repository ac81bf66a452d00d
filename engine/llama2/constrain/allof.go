package constrain

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// allOf merges the branches of s's allOf into one schema: the keywords of
// each (a local $ref resolved, its own allOf merged first) join s's, the
// properties of all in the order met, their required names together, the
// stricter additionalProperties. A keyword two of them set differently
// (a property's schema included) cannot be merged and is refused, with
// the path of the branch that differs.
func (c *compiler) allOf(s map[string]any, path string, depth int) (map[string]any, error) {
	list, ok := s["allOf"].([]any)
	if !ok || len(list) == 0 {
		return nil, &SchemaError{Path: path + "/allOf", Msg: "must be a non-empty array"}
	}
	if depth > maxDepth {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("nested deeper than %d", maxDepth)}
	}
	out := map[string]any{}
	for k, v := range s {
		if k != "allOf" {
			out[k] = v
		}
	}
	props := map[string]any{}
	var order []string
	addProps := func(p any, at string) error {
		if p == nil {
			return nil
		}
		m, ok := p.(map[string]any)
		if !ok {
			return &SchemaError{Path: at, Msg: fmt.Sprintf("must be an object, got %v", p)}
		}
		names := c.order[ptr(m)]
		if len(names) != len(m) {
			names = sortedKeys(m)
		}
		for _, name := range names {
			if have, ok := props[name]; ok {
				if !reflect.DeepEqual(have, m[name]) {
					return &SchemaError{Path: at + "/" + pointerEscape(name), Msg: "the property is declared differently by another allOf branch; such schemas cannot be merged"}
				}
				continue
			}
			props[name] = m[name]
			order = append(order, name)
		}
		return nil
	}
	if err := addProps(s["properties"], path+"/properties"); err != nil {
		return nil, err
	}
	required, _ := s["required"].([]any)
	required = slices.Clone(required)
	for i, b := range list {
		at := fmt.Sprintf("%s/allOf/%d", path, i)
		if b == true {
			continue
		}
		bm, ok := b.(map[string]any)
		if !ok {
			return nil, &SchemaError{Path: at, Msg: "an allOf branch must be an object or true"}
		}
		for range maxDepth { // a branch that is a reference: its target
			r, ok := bm["$ref"].(string)
			if !ok || !onlyAnnotations(bm, "$ref") {
				break
			}
			t, err := c.resolve(r, at+"/$ref")
			if err != nil {
				return nil, err
			}
			if bm, ok = t.(map[string]any); !ok {
				return nil, &SchemaError{Path: at + "/$ref", Msg: "an allOf branch must resolve to an object"}
			}
		}
		if _, ok := bm["allOf"]; ok {
			merged, err := c.allOf(bm, at, depth+1)
			if err != nil {
				return nil, err
			}
			bm = merged
		}
		for _, k := range sortedKeys(bm) {
			if !slices.Contains(Supported, k) && !slices.Contains(annotations, k) {
				return nil, &SchemaError{Path: at + "/" + pointerEscape(k), Msg: fmt.Sprintf("the keyword %q is not supported (supported: %s)", k, strings.Join(Supported, ", "))}
			}
		}
		for k, v := range bm {
			switch {
			case k == "properties":
				if err := addProps(v, at+"/properties"); err != nil {
					return nil, err
				}
			case k == "required":
				names, ok := v.([]any)
				if !ok {
					return nil, &SchemaError{Path: at + "/required", Msg: "must be an array of strings"}
				}
				for _, n := range names {
					if !slices.Contains(required, n) {
						required = append(required, n)
					}
				}
			case k == "additionalProperties":
				if have, ok := out[k]; !ok || have == true {
					out[k] = v
				} else if v != true && !reflect.DeepEqual(have, v) {
					return nil, &SchemaError{Path: at + "/" + k, Msg: "differs from another allOf branch's; such schemas cannot be merged"}
				}
			case k == "$defs" || k == "definitions" || slices.Contains(annotations, k):
			default:
				if have, ok := out[k]; ok && !reflect.DeepEqual(have, v) {
					return nil, &SchemaError{Path: at + "/" + pointerEscape(k), Msg: "differs from another allOf branch's; such schemas cannot be merged"}
				}
				out[k] = v
			}
		}
	}
	if len(props) > 0 {
		out["properties"] = props
		c.order[ptr(props)] = order
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out, nil
}
