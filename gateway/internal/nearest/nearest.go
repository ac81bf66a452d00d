// Package nearest finds the name a mistyped one probably meant, for the
// "did you mean" of error messages.
package nearest

import "strings"

// Name returns the candidate nearest to name: one equal but for case,
// else the one fewest edits away (Levenshtein, on bytes, case ignored)
// within a budget of 1+len(name)/4 edits; "" when none is near, or when
// name is itself a candidate. Ties go to the earlier candidate.
func Name(name string, candidates []string) string {
	for _, c := range candidates {
		if c == name {
			return ""
		}
	}
	for _, c := range candidates {
		if strings.EqualFold(c, name) {
			return c
		}
	}
	best, bestD := "", 2+len(name)/4
	for _, c := range candidates {
		if d := Distance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance of a and b, in bytes.
func Distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := range len(a) {
		diag := row[0]
		row[0] = i + 1
		for j := range len(b) {
			up := row[j+1]
			sub := diag
			if a[i] != b[j] {
				sub++
			}
			row[j+1] = min(up+1, row[j]+1, sub)
			diag = up
		}
	}
	return row[len(b)]
}
