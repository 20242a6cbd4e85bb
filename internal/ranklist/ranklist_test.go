package ranklist_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/internal/ranklist"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "no ranks"},
		{[]int{3}, "rank 3"},
		{[]int{3, 4}, "ranks 3 and 4"},
		{[]int{3, 7}, "ranks 3 and 7"},
		{[]int{1, 4, 7, 8, 9}, "ranks 1, 4 and 7-9"},
		{[]int{0, 1, 2, 3}, "ranks 0-3"},
		{[]int{3, 7, 10, 11, 12, 250}, "ranks 3, 7, 10-12 and 250"},
	} {
		assert.Equal(t, tc.want, ranklist.Format(tc.in), "%v", tc.in)
	}
}

func ExampleFormat() {
	fmt.Println(ranklist.Format([]int{0, 2, 5, 6, 7}))
	// Output: ranks 0, 2 and 5-7
}
