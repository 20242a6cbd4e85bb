// Package slurm reads Slurm's compressed per-node counts, which both
// rdmarun (placing ranks inside an allocation) and comm (joining a job
// started by srun) need.
//
//	counts, err := slurm.Counts(os.Getenv("SLURM_TASKS_PER_NODE"), 1<<16)
//	// "2(x3),1" → [2 2 2 1]
package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Counts expands a list like SLURM_TASKS_PER_NODE or
// SLURM_JOB_CPUS_PER_NODE: comma-separated counts, each optionally
// repeated with "(xN)". Counts and repeats are positive decimal numbers;
// a list that expands to more than max entries is an error, as is any
// malformed element (the error quotes it).
func Counts(s string, max int) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("bad element %q", part)
			}
			n, rep = part[:i], part[i+2:len(part)-1]
		}
		c, ok := positive(n)
		if !ok {
			return nil, fmt.Errorf("bad count %q", n)
		}
		r, ok := positive(rep)
		if !ok || len(out)+r > max {
			return nil, fmt.Errorf("bad repeat in %q", part)
		}
		for range r {
			out = append(out, c)
		}
	}
	return out, nil
}

// positive parses a decimal number of at most 9 digits that is at least 1.
func positive(s string) (int, bool) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1
}
