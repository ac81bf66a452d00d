package nearest

import "testing"

func TestName(t *testing.T) {
	fields := []string{"max_tokens", "messages", "model", "stream", "temperature", "top_p", "stop"}
	for _, tc := range []struct{ name, want string }{
		{"max_token", "max_tokens"},
		{"Max_Tokens", "max_tokens"},
		{"temprature", "temperature"},
		{"mesages", "messages"},
		{"stream", ""}, // a candidate itself
		{"bogus", ""},  // nothing near
		{"maxtokens", "max_tokens"},
		{"top", "stop"},         // one edit; top_p is two
		{"xyz_tokens_long", ""}, // too many edits
	} {
		if got := Name(tc.name, fields); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0}} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
