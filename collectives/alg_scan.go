package collectives

import "github.com/rdmago/rdmago/internal/ntcopy"

// scanRD is the recursive-doubling prefix reduction (any p): each rank
// keeps partial, the reduction of the aligned block of 2^k ranks around
// it, and swaps it with rank⊕2^k; what comes from a lower rank is combined
// on the left into both partial and the result, which keeps rank order for
// non-commutative ops. Exclusive scans start from "nothing" and take the
// first lower contribution as is. Returns whether buf holds a result
// (false on rank 0 of an exclusive scan).
func (c *call) scanRD(buf []byte, exclusive bool) (bool, error) {
	n := len(buf)
	partial := c.get(n)
	tmp := c.get(n)
	tmp2 := c.get(n)
	ntcopy.Bulk(partial, buf)
	have := !exclusive
	for mask := 1; mask < c.n; mask <<= 1 {
		dst := c.me ^ mask
		if dst >= c.n {
			continue
		}
		if err := c.exchange(dst, partial, dst, tmp); err != nil {
			return false, err
		}
		if dst < c.me {
			if have {
				ntcopy.Bulk(tmp2, tmp)
				c.combineLower(buf, tmp2)
			} else {
				ntcopy.Bulk(buf, tmp)
				have = true
			}
			c.combineLower(partial, tmp)
		} else {
			c.kern.Combine(partial, tmp)
		}
	}
	return have, nil
}
