package ranklist

import (
	"strconv"
	"strings"
)

// Format writes "rank 3", "ranks 3 and 4", "ranks 3, 7 and 10-250": runs
// of three or more consecutive ranks as a range. ranks must be sorted
// ascending; none gives "no ranks".
func Format(ranks []int) string {
	if len(ranks) == 0 {
		return "no ranks"
	}
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if j-i >= 2 {
			parts = append(parts, strconv.Itoa(ranks[i])+"-"+strconv.Itoa(ranks[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(ranks[k]))
			}
		}
		i = j + 1
	}
	word := "ranks "
	if len(ranks) == 1 {
		word = "rank "
	}
	if len(parts) == 1 {
		return word + parts[0]
	}
	return word + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
