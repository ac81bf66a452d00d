package cli

import (
	"strings"
)

// Closest returns the candidate nearest to s, or "" when none is near:
// the one fewest edits away (inserting, deleting or replacing a character,
// or swapping two neighbours; case and _ for - are free), within a
// budget that grows with the length of s; failing that, the only
// candidate that s begins or ends in whole dash-separated words (ping
// for ws-ping-timeout when no other ends or begins so). Ties go to the
// earlier candidate.
func Closest(s string, candidates []string) string {
	norm := func(x string) string { return strings.ToLower(strings.ReplaceAll(x, "_", "-")) }
	n := norm(s)
	budget := 0
	switch l := len(n); {
	case l > 8:
		budget = 3
	case l > 4:
		budget = 2
	case l > 2:
		budget = 1
	}
	best, bestD := "", budget+1
	for _, c := range candidates {
		if d := distance(n, norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	var words string
	for _, c := range candidates {
		nc := norm(c)
		if strings.HasPrefix(nc, n+"-") || strings.HasSuffix(nc, "-"+n) {
			if words != "" {
				return ""
			}
			words = c
		}
	}
	return words
}

// distance is the optimal string alignment distance of a and b: the
// edits of Closest, counted on bytes.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
