package slurm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCounts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"4", []int{4}},
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"1,3(x2)", []int{1, 3, 3}},
	} {
		got, err := Counts(c.in, 100)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	for _, bad := range []string{"", "x", "0", "-1", "+2", "2(x)", "2(3)", "2(x0)", "2(x101)", "2,,1", "2(x2", "1234567890"} {
		_, err := Counts(bad, 100)
		assert.Error(t, err, bad)
	}
	_, err := Counts("2(x3),1", 3)
	assert.ErrorContains(t, err, `bad repeat in "1"`, "past max")
}
