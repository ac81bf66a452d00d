package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// ToolFormatGuided is the output ToolGuide constrains a model to: one
// call {"name": ..., "arguments": {...}}, or a JSON array of them, and
// nothing else. ToolParser reads it as it streams: each call's arguments
// come out in pieces as they are generated (Deltas), not only whole.
const ToolFormatGuided ToolFormat = "guided"

// CallDelta is a piece of a call streamed as the model writes it: the
// first of each call carries its ID and Name, every one a piece of its
// Arguments (possibly empty). Done marks the call's last piece.
type CallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
	Done      bool
}

// The states of the guided scanner.
const (
	gTop   = iota // before the value: [ or {
	gList         // in the array, between calls
	gObj          // in a call object, between members
	gKey          // in a member's key
	gColon        // after a key
	gValue        // before a member's value
	gName         // in the name string
	gArgs         // in the arguments object
	gEnd          // after the value
	gBad          // not the guided shape: all of it is content
)

// guided is the scanner state of ToolFormatGuided.
type guided struct {
	state     int
	key, name []byte // the member key, the name's JSON string
	args      []byte // the arguments so far, compact
	sent      int    // bytes of args given out as deltas
	depth     int    // nesting inside the arguments
	inStr     bool   // inside a string of the arguments
	esc       bool   // after a backslash in a string
	named     bool   // the call's name is known (ID and Name delta sent)
	deltas    []CallDelta
	streamed  bool   // Deltas gave something out
	list      bool   // the output is an array of calls
	raw       []byte // all the output
	pending   []ToolCall
	completed int // calls closed
}

// feedGuided scans text of the guided format.
func (p *ToolParser) feedGuided(text []byte) []ToolCall {
	g := &p.g
	g.raw = append(g.raw, text...)
	for _, c := range text {
		g.step(p, c)
	}
	if g.state == gArgs {
		g.flush(p, false)
	}
	calls := g.pending
	g.pending = nil
	return calls
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// step takes one byte of output.
func (g *guided) step(p *ToolParser, c byte) {
	switch g.state {
	case gTop:
		switch {
		case space(c):
		case c == '[':
			g.state, g.list = gList, true
		case c == '{':
			g.open()
		default:
			g.state = gBad
		}
	case gList:
		switch {
		case space(c) || c == ',':
		case c == '{':
			g.open()
		case c == ']':
			g.state = gEnd
		default:
			g.state = gBad
		}
	case gObj:
		switch {
		case space(c) || c == ',':
		case c == '"':
			g.key, g.state = g.key[:0], gKey
		case c == '}':
			g.close(p)
		default:
			g.state = gBad
		}
	case gKey:
		if c == '"' {
			g.state = gColon
		} else {
			g.key = append(g.key, c)
		}
	case gColon:
		switch {
		case space(c):
		case c == ':':
			g.state = gValue
		default:
			g.state = gBad
		}
	case gValue:
		switch {
		case space(c):
		case string(g.key) == "name" && c == '"':
			g.name, g.state = append(g.name[:0], c), gName
		case string(g.key) == "arguments" && c == '{':
			g.args, g.depth, g.state = append(g.args[:0], c), 1, gArgs
		default:
			g.state = gBad
		}
	case gName:
		g.name = append(g.name, c)
		switch {
		case g.esc:
			g.esc = false
		case c == '\\':
			g.esc = true
		case c == '"':
			g.state = gObj
			g.flush(p, false)
		}
	case gArgs:
		if !g.inStr && space(c) {
			return
		}
		g.args = append(g.args, c)
		switch {
		case g.esc:
			g.esc = false
		case g.inStr && c == '\\':
			g.esc = true
		case c == '"':
			g.inStr = !g.inStr
		case g.inStr:
		case c == '{' || c == '[':
			g.depth++
		case c == '}' || c == ']':
			if g.depth--; g.depth == 0 {
				g.state = gObj
			}
		}
	case gEnd:
		if !space(c) {
			g.state = gBad
		}
	}
}

// open starts a call object.
func (g *guided) open() {
	g.state, g.named, g.sent = gObj, false, 0
	g.name, g.args = g.name[:0], g.args[:0]
}

// flush gives out, once the name is known, the arguments not yet given
// out: as the call's first delta (with its ID and name) or the next.
func (g *guided) flush(p *ToolParser, done bool) {
	var name string
	if len(g.name) > 0 && json.Unmarshal(g.name, &name) != nil {
		g.state = gBad
		return
	}
	if !p.Live || name == "" || p.Single && g.completed > 0 {
		return
	}
	d := CallDelta{Index: g.completed, Arguments: string(g.args[g.sent:]), Done: done}
	if !g.named {
		d.ID, d.Name, g.named = p.IDPrefix+strconv.Itoa(g.completed), name, true
	}
	g.sent = len(g.args)
	if d.Arguments != "" || d.Name != "" || d.Done {
		g.deltas = append(g.deltas, d)
	}
}

// close ends a call object: a call when it has a declared name and its
// arguments.
func (g *guided) close(p *ToolParser) {
	g.flush(p, true)
	if g.state == gBad {
		return
	}
	c, ok := p.call(append(append(append(append([]byte(`{"name":`), g.name...), `,"arguments":`...), g.args...), '}'), "arguments")
	if !ok || len(g.args) == 0 {
		g.state = gBad
		return
	}
	if !p.Single || g.completed == 0 {
		c.ID = p.IDPrefix + strconv.Itoa(g.completed)
		g.pending = append(g.pending, c)
	}
	g.completed++
	p.calls = g.completed
	g.state = gEnd
	if g.list {
		g.state = gList
	}
}

// finishGuided ends the guided output. A call cut off (by the token
// limit) after its name is a Partial call with the arguments written so
// far, as it streamed; output that made no call (of another shape) is
// content, unless part of it already streamed as deltas.
func (p *ToolParser) finishGuided() (content []byte, calls []ToolCall) {
	g := &p.g
	var name string
	if g.state >= gObj && g.state <= gArgs && g.state != gName && json.Unmarshal(g.name, &name) == nil && p.declared(name) {
		if g.state == gArgs {
			g.flush(p, false)
		}
		if !p.Single || g.completed == 0 {
			calls = []ToolCall{{ID: p.IDPrefix + strconv.Itoa(g.completed), Name: name, Arguments: string(g.args), Partial: true}}
		}
		g.completed++
		return nil, calls
	}
	if g.completed > 0 || g.streamed || len(bytes.TrimSpace(g.raw)) == 0 {
		return nil, nil
	}
	return bytes.Clone(g.raw), nil
}

// Deltas returns the pieces of calls the last Feed found, in the guided
// format with Live set (nil otherwise: calls come whole). They are valid
// until the next Feed.
func (p *ToolParser) Deltas() []CallDelta {
	d := p.g.deltas
	p.g.deltas = p.g.deltas[:0]
	if len(d) > 0 {
		p.g.streamed = true
	}
	return d
}
