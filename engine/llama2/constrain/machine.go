package constrain

import "math/bits"

// The matcher is a pushdown automaton over bytes. A stack is a chain of
// immutable frames (each step copies the top frame and shares the rest),
// so that forking at an anyOf, and walking every vocabulary token from the
// same state, costs one small allocation per byte. A state is a set of
// stacks: one per anyOf branch still alive.

// maxStack bounds the nesting of the output, and so a state's size.
const maxStack = 128

// maxAlive bounds the stacks of one state (live anyOf branches).
const maxAlive = 64

// Sub-states of a frame, by kind.
const (
	// root
	rootStart uint8 = iota
	rootDone
	// object
	objOpen     // after '{'
	objKey      // in a declared key: cand, n = bytes matched
	objAfterKey // after the key's closing quote
	objColon    // after ':'
	objAfterVal // after a value
	objComma    // after ','
	// array
	arrOpen
	arrAfterVal
	arrComma
	// string
	strChar
	strEsc
	strHex // n2 = hex digits read
	// number
	numMinus
	numZero
	numInt
	numDot
	numFrac
	numE
	numESign
	numExp
	// literal
	litIn
)

// frame is one level of the stack. Fields not used by a kind are zero, so
// equal frames mean equal futures.
type frame struct {
	parent *frame
	node   *node
	st     uint8
	spaced bool   // a space was taken in the current gap
	depth  uint8  // frames below this one
	cur    uint8  // object: the property whose value is being read
	n      int32  // string characters, array items, key bytes, digits, literal bytes
	n2     int32  // string: continuation bytes owed (and the lead's range), or hex digits read
	seen   uint64 // object: properties present; literal: candidates alive
	cand   uint64 // object: keys still matching
	key    bool   // a string frame reading a free object key
}

// start returns the stacks that read a value of n after parent, fed b.
func start(out []*frame, parent *frame, n *node, b byte, hops int) []*frame {
	if n.kind == kindAnyOf {
		if hops > 16 { // a chain of references that reads no byte
			return out
		}
		for _, a := range n.alts {
			out = start(out, parent, a, b, hops+1)
		}
		return out
	}
	depth := parent.depth + 1
	if depth >= maxStack {
		return out
	}
	f := &frame{parent: parent, node: n, depth: depth}
	switch n.kind {
	case kindObject:
		if b != '{' {
			return out
		}
		f.st = objOpen
	case kindArray:
		if b != '[' {
			return out
		}
		f.st = arrOpen
	case kindString:
		if b != '"' {
			return out
		}
		f.st = strChar
	case kindNumber, kindInteger:
		switch {
		case b == '-':
			f.st = numMinus
		case b == '0':
			f.st = numZero
		case b >= '1' && b <= '9':
			f.st, f.n = numInt, 1
		default:
			return out
		}
	case kindLiteral:
		for i, l := range n.lits {
			if l[0] == b {
				f.seen |= 1 << i
			}
		}
		if f.seen == 0 {
			return out
		}
		f.st, f.n = litIn, 1
	}
	return append(out, f)
}

// clone copies f for a step.
func clone(f *frame) *frame {
	c := *f
	return &c
}

// done returns the stack after f's value completes: its parent, advanced.
func done(f *frame) *frame {
	p := clone(f.parent)
	p.spaced = false
	switch {
	case p.node.kind == kindRoot:
		p.st = rootDone
	case p.node.kind == kindObject:
		if f.key {
			p.st = objAfterKey
		} else {
			p.st = objAfterVal
		}
	case p.node.kind == kindArray:
		p.st = arrAfterVal
		p.n++
	}
	return p
}

// canEnd reports whether f's value may end here without a closing byte (a
// number or a literal that is complete).
func canEnd(f *frame) bool {
	switch f.st {
	case numZero, numInt, numFrac, numExp:
		return true
	case litIn:
		for i, l := range f.node.lits {
			if f.seen&(1<<i) != 0 && int(f.n) == len(l) {
				return true
			}
		}
	}
	return false
}

// step appends to out the stacks that f becomes when fed b.
func step(out []*frame, f *frame, b byte) []*frame {
	if f.node.kind == kindRoot {
		if f.st != rootStart {
			return out // nothing follows the value
		}
		return start(out, f, f.node.alts[0], b, 0) // no space before the value
	}
	if b == ' ' && gap(f) && !f.spaced {
		g := clone(f)
		g.spaced = true
		return append(out, g)
	}
	switch f.node.kind {
	case kindObject:
		return stepObject(out, f, b)
	case kindArray:
		return stepArray(out, f, b)
	case kindString:
		return stepString(out, f, b)
	case kindNumber, kindInteger:
		return stepNumber(out, f, b)
	case kindLiteral:
		return stepLiteral(out, f, b)
	}
	return out
}

// gap reports whether f is between tokens, where one space may be taken.
func gap(f *frame) bool {
	switch f.st {
	case objOpen, objAfterKey, objColon, objAfterVal, objComma, arrOpen, arrAfterVal, arrComma:
		return true
	}
	return false
}

func stepObject(out []*frame, f *frame, b byte) []*frame {
	n := f.node
	openKey := func() []*frame {
		if n.extra != nil {
			k := &frame{parent: f, node: freeKey, st: strChar, depth: f.depth + 1, key: true}
			return append(out, k)
		}
		free := n.next(f.seen)
		if free == 0 {
			return out
		}
		g := clone(f)
		g.st, g.spaced, g.cand, g.n = objKey, false, free, 0
		return append(out, g)
	}
	switch f.st {
	case objOpen:
		if b == '}' && n.required == 0 {
			return append(out, done(f))
		}
		if b == '"' {
			return openKey()
		}
	case objComma:
		if b == '"' {
			return openKey()
		}
	case objKey:
		if b == '"' {
			for i, p := range n.props {
				if f.cand&(1<<i) != 0 && int(f.n) == len(p.key) {
					g := clone(f)
					g.st, g.cand, g.n, g.cur = objAfterKey, 0, 0, uint8(i)
					return append(out, g)
				}
			}
			return out
		}
		var cand uint64
		for i, p := range n.props {
			if f.cand&(1<<i) != 0 && int(f.n) < len(p.key) && p.key[f.n] == b {
				cand |= 1 << i
			}
		}
		if cand != 0 {
			g := clone(f)
			g.cand, g.n = cand, f.n+1
			return append(out, g)
		}
	case objAfterKey:
		if b == ':' {
			g := clone(f)
			g.st, g.spaced = objColon, false
			return append(out, g)
		}
	case objColon:
		g := clone(f)
		g.spaced = false
		val := n.extra
		if val == nil {
			val = n.props[f.cur].node
			g.seen |= 1 << f.cur
		}
		g.st = objColon // done() moves it to objAfterVal
		return start(out, g, val, b, 0)
	case objAfterVal:
		switch b {
		case ',':
			if n.extra != nil || n.next(f.seen) != 0 {
				g := clone(f)
				g.st, g.spaced = objComma, false
				return append(out, g)
			}
		case '}':
			if f.seen&n.required == n.required {
				return append(out, done(f))
			}
		}
	}
	return out
}

// next is the properties of object n that may come after those in seen:
// the declared ones after the last written, up to the first required one
// (which cannot be skipped).
func (n *node) next(seen uint64) uint64 {
	var free uint64
	for i := bits.Len64(seen); i < len(n.props); i++ {
		free |= 1 << i
		if n.required&(1<<i) != 0 {
			break
		}
	}
	return free
}

func stepArray(out []*frame, f *frame, b byte) []*frame {
	n := f.node
	item := func() []*frame {
		if n.maxItems >= 0 && int(f.n) >= n.maxItems {
			return out
		}
		g := clone(f)
		g.spaced = false
		return start(out, g, n.items, b, 0)
	}
	switch f.st {
	case arrOpen:
		if b == ']' {
			if n.minItems == 0 {
				return append(out, done(f))
			}
			return out
		}
		return item()
	case arrComma:
		return item()
	case arrAfterVal:
		switch b {
		case ',':
			if n.maxItems < 0 || int(f.n) < n.maxItems {
				g := clone(f)
				g.st, g.spaced = arrComma, false
				return append(out, g)
			}
		case ']':
			if int(f.n) >= n.minItems {
				return append(out, done(f))
			}
		}
	}
	return out
}

// Leads whose first continuation byte has a narrower range (no overlong
// forms, no surrogates, nothing above U+10FFFF), kept in n2's high bits.
const (
	utfE0 = 1 + iota
	utfED
	utfF0
	utfF4
)

func stepString(out []*frame, f *frame, b byte) []*frame {
	n := f.node
	full := n.maxLen >= 0 && int(f.n) >= n.maxLen
	g := clone(f)
	if n.pattern != nil && f.st == strChar { // n2 is the pattern's state
		switch {
		case b == '"':
			if n.pattern.accept[f.n2] {
				return append(out, done(f))
			}
		case b < 0x80:
			if t := n.pattern.next[f.n2][b]; t >= 0 {
				g.n2 = int32(t)
				return append(out, g)
			}
		}
		return out
	}
	switch f.st {
	case strChar:
		switch {
		case f.n2 > 0: // a continuation byte is owed
			lo, hi := byte(0x80), byte(0xBF)
			switch f.n2 >> 4 { // the first continuation after some leads
			case utfE0:
				lo = 0xA0
			case utfED:
				hi = 0x9F
			case utfF0:
				lo = 0x90
			case utfF4:
				hi = 0x8F
			}
			if b < lo || b > hi {
				return out
			}
			g.n2 = f.n2&0xF - 1
			return append(out, g)
		case b == '"':
			if int(f.n) < n.minLen {
				return out
			}
			return append(out, done(f))
		case full || b < 0x20:
			return out
		case b == '\\':
			g.st = strEsc
		case b < 0x80:
			g.n++
		case b >= 0xC2 && b <= 0xDF:
			g.n, g.n2 = g.n+1, 1
		case b >= 0xE0 && b <= 0xEF:
			g.n, g.n2 = g.n+1, 2
			if b == 0xE0 {
				g.n2 |= utfE0 << 4
			} else if b == 0xED {
				g.n2 |= utfED << 4
			}
		case b >= 0xF0 && b <= 0xF4:
			g.n, g.n2 = g.n+1, 3
			if b == 0xF0 {
				g.n2 |= utfF0 << 4
			} else if b == 0xF4 {
				g.n2 |= utfF4 << 4
			}
		default:
			return out
		}
		return append(out, g)
	case strEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			g.st, g.n = strChar, g.n+1
		case 'u':
			g.st, g.n2 = strHex, 0
		default:
			return out
		}
		return append(out, g)
	case strHex:
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return out
		}
		g.n2++
		if g.n2 == 4 {
			g.st, g.n, g.n2 = strChar, g.n+1, 0
		}
		return append(out, g)
	}
	return out
}

func digit(b byte) bool { return b >= '0' && b <= '9' }

func stepNumber(out []*frame, f *frame, b byte) []*frame {
	g := clone(f)
	integer := f.node.kind == kindInteger
	next := func(st uint8, n int32) []*frame {
		if n > maxDigits {
			return out
		}
		g.st, g.n = st, n
		return append(out, g)
	}
	switch {
	case f.st == numMinus && b == '0':
		return next(numZero, 0)
	case f.st == numMinus && b >= '1' && b <= '9':
		return next(numInt, 1)
	case f.st == numInt && digit(b):
		return next(numInt, f.n+1)
	case (f.st == numInt || f.st == numZero) && b == '.' && !integer:
		return next(numDot, 0)
	case (f.st == numDot || f.st == numFrac) && digit(b):
		return next(numFrac, f.n+1)
	case (f.st == numInt || f.st == numZero || f.st == numFrac) && (b == 'e' || b == 'E') && !integer && !f.node.noExp:
		return next(numE, 0)
	case f.st == numE && (b == '+' || b == '-'):
		return next(numESign, 0)
	case (f.st == numE || f.st == numESign || f.st == numExp) && digit(b):
		return next(numExp, f.n+1)
	}
	if canEnd(f) {
		return step(out, done(f), b)
	}
	return out
}

func stepLiteral(out []*frame, f *frame, b byte) []*frame {
	var alive uint64
	for i, l := range f.node.lits {
		if f.seen&(1<<i) != 0 && int(f.n) < len(l) && l[f.n] == b {
			alive |= 1 << i
		}
	}
	if alive != 0 {
		g := clone(f)
		g.seen, g.n = alive, f.n+1
		out = append(out, g)
	}
	if canEnd(f) {
		out = step(out, done(f), b)
	}
	return out
}
