package openaiapi

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/gateway/core"
)

// inputItem is an item of GET /v1/responses/{id}/input_items.
// A message has Role and Content, a function_call CallID, Name and
// Arguments, a function_call_output CallID and Output.
type inputItem struct {
	ID        string              `json:"id"`
	Type      string              `json:"type"`
	Role      string              `json:"role,omitempty"`
	Status    string              `json:"status"`
	Content   []inputItemTextPart `json:"content,omitempty"`
	CallID    string              `json:"call_id,omitempty"`
	Name      string              `json:"name,omitempty"`
	Arguments string              `json:"arguments,omitempty"`
	Output    *string             `json:"output,omitempty"`
}

type inputItemTextPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ResponseInputItems serves GET /v1/responses/{id}/input_items: the
// response's own input, as message items, in order.
func (s *API) ResponseInputItems(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	_, data, err := s.LoadResponse(r.Context(), id, "")
	if err != nil {
		return err
	}
	items := make([]inputItem, 0, len(data.Input))
	itemID := func() string { return "msg-" + strings.TrimPrefix(id, "resp-") + "-" + strconv.Itoa(len(items)) }
	for _, m := range data.Input {
		switch {
		case m.Role == "tool":
			out := m.Content
			items = append(items, inputItem{ID: itemID(), Type: "function_call_output", Status: "completed", CallID: m.ToolCallID, Output: &out})
		case len(m.ToolCalls) > 0:
			for _, c := range m.ToolCalls {
				items = append(items, inputItem{ID: itemID(), Type: "function_call", Status: "completed", CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
		default:
			typ := "input_text"
			if m.Role == "assistant" {
				typ = "output_text"
			}
			items = append(items, inputItem{ID: itemID(), Type: "message", Role: m.Role,
				Status: "completed", Content: []inputItemTextPart{{Type: typ, Text: m.Content}}})
		}
	}
	items, more, err := pageInputItems(r.URL.Query(), items)
	if err != nil {
		return err
	}
	list := struct {
		Object  string      `json:"object"`
		Data    []inputItem `json:"data"`
		FirstID *string     `json:"first_id"`
		LastID  *string     `json:"last_id"`
		HasMore bool        `json:"has_more"`
	}{Object: "list", Data: items, HasMore: more}
	if len(items) > 0 {
		list.FirstID, list.LastID = &items[0].ID, &items[len(items)-1].ID
	}
	core.WriteJSON(w, http.StatusOK, jsonOf(list))
	return nil
}

// pageInputItems is the page of items (in input order) that q asks for:
// order (asc, the default, or desc), after (an item's id: the items
// after it in that order) and limit (1 to 100; default all). more is
// whether items follow the page.
func pageInputItems(q url.Values, items []inputItem) (page []inputItem, more bool, err error) {
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		slices.Reverse(items)
	default:
		return nil, false, &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "order",
			Msg: "Invalid value for 'order': '" + core.Truncate(q.Get("order"), 64) + "' is not one of 'asc', 'desc'."}
	}
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(items, func(it inputItem) bool { return it.ID == after })
		if i < 0 {
			return nil, false, &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "after",
				Msg: "Invalid value for 'after': '" + core.Truncate(after, 64) + "' is not an input item of this response."}
		}
		items = items[i+1:]
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, false, &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "limit",
				Msg: "Invalid value for 'limit': '" + core.Truncate(v, 64) + "' must be an integer between 1 and 100."}
		}
		if len(items) > n {
			return items[:n], true, nil
		}
	}
	return items, false, nil
}
