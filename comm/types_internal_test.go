package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/collectives/reduce"
)

type namedInt32 int32

// TestSizeOfMatchesDType: the element size Isend, Irecv and the statuses
// divide by is the one the collectives' type descriptors give, for every
// kind of element (named types and the 16-bit floats included).
func TestSizeOfMatchesDType(t *testing.T) {
	check := func(name string, got, want int) { assert.Equal(t, want, got, name) }
	check("int", sizeOf[int](), reduce.DTypeOf[int]().Size())
	check("int8", sizeOf[int8](), reduce.DTypeOf[int8]().Size())
	check("int16", sizeOf[int16](), reduce.DTypeOf[int16]().Size())
	check("int32", sizeOf[int32](), reduce.DTypeOf[int32]().Size())
	check("int64", sizeOf[int64](), reduce.DTypeOf[int64]().Size())
	check("uint", sizeOf[uint](), reduce.DTypeOf[uint]().Size())
	check("byte", sizeOf[byte](), reduce.DTypeOf[byte]().Size())
	check("uint16", sizeOf[uint16](), reduce.DTypeOf[uint16]().Size())
	check("uint32", sizeOf[uint32](), reduce.DTypeOf[uint32]().Size())
	check("uint64", sizeOf[uint64](), reduce.DTypeOf[uint64]().Size())
	check("uintptr", sizeOf[uintptr](), reduce.DTypeOf[uintptr]().Size())
	check("float32", sizeOf[float32](), reduce.DTypeOf[float32]().Size())
	check("float64", sizeOf[float64](), reduce.DTypeOf[float64]().Size())
	check("BFloat16", sizeOf[BFloat16](), reduce.DTypeOf[BFloat16]().Size())
	check("Float16", sizeOf[Float16](), reduce.DTypeOf[Float16]().Size())
	check("named int32", sizeOf[namedInt32](), reduce.DTypeOf[namedInt32]().Size())
}
