package comm

import (
	"unsafe"

	"github.com/rdmago/rdmago/collectives/reduce"
)

// Element is every element type comm moves and reduces: Go's integer and
// floating-point types (byte included, so []byte works everywhere), named
// types over them, and the 16-bit floats BFloat16 and Float16.
type Element = reduce.Element

// BFloat16 and Float16 are the 16-bit float element types (named uint16
// types; reductions compute in float32 and round back to nearest even).
type (
	BFloat16 = reduce.BFloat16
	Float16  = reduce.Float16
)

// Op is a reduction operation. The built-in ops are plain values that work
// for every element type they make sense for (comm.Allreduce(ctx, c, buf,
// comm.Sum) with buf of any numeric type); NewOp makes user-defined ones.
type Op = reduce.Op

// The built-in ops. Integer Sum and Prod wrap around as Go arithmetic
// does; Min and Max on floats propagate NaN; Avg is Sum divided by the
// number of contributions (truncating for integers); logical ops treat
// non-zero as true and produce 1 or 0; bitwise ops are for integers only
// (on floats the call fails with ErrUnsupported on every rank).
var (
	Sum  = reduce.Sum
	Prod = reduce.Prod
	Min  = reduce.Min
	Max  = reduce.Max
	Avg  = reduce.Avg
	BAnd = reduce.BAnd
	BOr  = reduce.BOr
	BXor = reduce.BXor
	LAnd = reduce.LAnd
	LOr  = reduce.LOr
)

// NewOp makes a user-defined reduction for element type T. f must set
// inout[i] = inout[i] ⊕ in[i] for every i, where inout holds the
// contribution of lower ranks, and ⊕ must be associative; with commutative
// false the collectives keep rank order. f must not keep the slices. Using
// the op with another element type fails with ErrUnsupported.
func NewOp[T Element](name string, commutative bool, f func(inout, in []T)) Op {
	return reduce.Func(name, commutative, f)
}

// bytesOf is the []T → []byte view (the one in collectives/reduce: it is
// the only place rdmago reinterprets element memory).
func bytesOf[T Element](s []T) []byte { return reduce.Bytes(s) }

// sizeOf is T's size in bytes: constant in each instantiation, where
// reduce.DTypeOf's type switch loads the type's descriptor (1.4% of a
// 1-byte bw's samples, at every Isend and Irecv).
func sizeOf[T Element]() int {
	var z T
	return int(unsafe.Sizeof(z))
}
