package reduce

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lengths around the 8-way unrolling and the 8-byte words of the bitwise
// kernels, plus one large enough for the assembly paths.
var lengths = []int{0, 1, 3, 7, 8, 9, 15, 16, 17, 1000, 4099}

// ref is the plain definition of each op for numeric T.
func ref[T number](code OpCode, a, b T) T {
	switch code {
	case OpSum, OpAvg:
		return a + b
	case OpProd:
		return a * b
	case OpMin:
		return min(a, b)
	case OpMax:
		return max(a, b)
	case OpLAnd:
		return boolTo[T](a != 0 && b != 0)
	case OpLOr:
		return boolTo[T](a != 0 || b != 0)
	}
	panic(code)
}

func refBits[T ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64](code OpCode, a, b T) T {
	switch code {
	case OpBAnd:
		return a & b
	case OpBOr:
		return a | b
	}
	return a ^ b
}

func gen[T number](rng *rand.Rand, n int, float bool) []T {
	x := make([]T, n)
	for i := range x {
		if float {
			x[i] = T(rng.NormFloat64() * 100)
			if i%11 == 3 {
				x[i] = 0
			}
		} else {
			x[i] = T(rng.Uint64())
			if i%7 == 2 {
				x[i] = 0
			}
		}
	}
	return x
}

func checkNumeric[T number](t *testing.T, float bool) {
	dt := DTypeOf[T]()
	rng := rand.New(rand.NewPCG(uint64(dt), 9))
	for _, op := range Builtins {
		bitwise := op.Code() == OpBAnd || op.Code() == OpBOr || op.Code() == OpBXor
		k, err := op.Resolve(dt)
		if bitwise && float {
			require.ErrorIs(t, err, ErrUnsupported, "%v on %v", op, dt)
			continue
		}
		require.NoError(t, err, "%v on %v", op, dt)
		for _, n := range lengths {
			// Offset views exercise unaligned starts of the word kernels.
			for _, off := range []int{0, 1} {
				if off > n {
					continue
				}
				a, b := gen[T](rng, n, float)[off:], gen[T](rng, n, float)[off:]
				want := make([]T, len(a))
				for i := range a {
					if bitwise {
						want[i] = bitsOf(op.Code(), a[i], b[i])
					} else {
						want[i] = ref(op.Code(), a[i], b[i])
					}
				}
				k.Combine(Bytes(a), Bytes(b))
				for i := range a {
					if a[i] != want[i] && !(float && math.IsNaN(float64(a[i])) && math.IsNaN(float64(want[i]))) {
						t.Fatalf("%v on %v, n=%d off=%d: element %d is %v, want %v", op, dt, n, off, i, a[i], want[i])
					}
				}
			}
		}
	}
}

// bitsOf dispatches refBits through the unsigned type of T's width.
func bitsOf[T number](code OpCode, a, b T) T {
	switch x := any(a).(type) {
	case int8:
		return any(refBits(code, x, any(b).(int8))).(T)
	case int16:
		return any(refBits(code, x, any(b).(int16))).(T)
	case int32:
		return any(refBits(code, x, any(b).(int32))).(T)
	case int64:
		return any(refBits(code, x, any(b).(int64))).(T)
	case uint8:
		return any(refBits(code, x, any(b).(uint8))).(T)
	case uint16:
		return any(refBits(code, x, any(b).(uint16))).(T)
	case uint32:
		return any(refBits(code, x, any(b).(uint32))).(T)
	case uint64:
		return any(refBits(code, x, any(b).(uint64))).(T)
	}
	panic(fmt.Sprintf("bitwise on %T", a))
}

func TestKernelsAllTypesAllOps(t *testing.T) {
	t.Run("int8", func(t *testing.T) { checkNumeric[int8](t, false) })
	t.Run("int16", func(t *testing.T) { checkNumeric[int16](t, false) })
	t.Run("int32", func(t *testing.T) { checkNumeric[int32](t, false) })
	t.Run("int64", func(t *testing.T) { checkNumeric[int64](t, false) })
	t.Run("uint8", func(t *testing.T) { checkNumeric[uint8](t, false) })
	t.Run("uint16", func(t *testing.T) { checkNumeric[uint16](t, false) })
	t.Run("uint32", func(t *testing.T) { checkNumeric[uint32](t, false) })
	t.Run("uint64", func(t *testing.T) { checkNumeric[uint64](t, false) })
	t.Run("float32", func(t *testing.T) { checkNumeric[float32](t, true) })
	t.Run("float64", func(t *testing.T) { checkNumeric[float64](t, true) })
}

func TestHalfKernels(t *testing.T) {
	type half struct {
		dt     DType
		wide   func(uint16) float32
		narrow func(float32) uint16
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, h := range []half{
		{BF16, func(v uint16) float32 { return BFloat16(v).Float32() }, func(f float32) uint16 { return uint16(BFloat16From(f)) }},
		{F16, func(v uint16) float32 { return Float16(v).Float32() }, func(f float32) uint16 { return uint16(Float16From(f)) }},
	} {
		for _, op := range Builtins {
			k, err := op.Resolve(h.dt)
			if c := op.Code(); c == OpBAnd || c == OpBOr || c == OpBXor {
				require.ErrorIs(t, err, ErrUnsupported)
				continue
			}
			require.NoError(t, err)
			for _, n := range lengths {
				a, b := make([]uint16, n), make([]uint16, n)
				for i := range a {
					a[i] = h.narrow(float32(rng.NormFloat64() * 10))
					b[i] = h.narrow(float32(rng.NormFloat64() * 10))
					if i%9 == 4 {
						b[i] = 0
					}
				}
				want := make([]uint16, n)
				for i := range a {
					want[i] = h.narrow(ref(op.Code(), h.wide(a[i]), h.wide(b[i])))
				}
				k.Combine(Bytes(a), Bytes(b))
				require.Equal(t, want, a, "%v on %v n=%d", op, h.dt, n)
			}
		}
	}
	// A sum that must round: 1 + 2^-9 in bfloat16 (8-bit significand) is a
	// tie between 1 and 1+2^-7... check a concrete case instead: 256 + 1 =
	// 257 is not representable in bfloat16; ties to even gives 256.
	a := []BFloat16{BFloat16From(256)}
	require.NoError(t, Reduce(Sum, a, []BFloat16{BFloat16From(1)}))
	require.Equal(t, float32(256), a[0].Float32())
	b := []Float16{Float16From(2048)}
	require.NoError(t, Reduce(Sum, b, []Float16{Float16From(3)})) // 2051 → 2052 (ties to even)
	require.Equal(t, float32(2052), b[0].Float32())
}

func TestAvgFinish(t *testing.T) {
	k, err := Avg.Resolve(Int32)
	require.NoError(t, err)
	x := []int32{10, -7, 3}
	k.Finish(Bytes(x), 2)
	require.Equal(t, []int32{5, -3, 1}, x)
	k, err = Avg.Resolve(BF16)
	require.NoError(t, err)
	y := []BFloat16{BFloat16From(3)}
	k.Finish(Bytes(y), 2)
	require.Equal(t, float32(1.5), y[0].Float32())
}

func TestUserOp(t *testing.T) {
	// Non-commutative: keep the left operand's non-zero value.
	first := Func("first", false, func(inout, in []int32) {
		for i := range inout {
			if inout[i] == 0 {
				inout[i] = in[i]
			}
		}
	})
	require.False(t, first.Commutative())
	a := []int32{0, 5}
	require.NoError(t, Reduce(first, a, []int32{7, 9}))
	require.Equal(t, []int32{7, 5}, a)
	_, err := first.Resolve(Float32)
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "int32")
	_, err = Op{}.Resolve(Float32)
	require.ErrorIs(t, err, ErrUnsupported)
	require.False(t, Func[int32]("nil", true, nil).Valid())
	err = Reduce(Sum, []int32{1}, []int32{1, 2})
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrUnsupported))
}

// TestResolveEveryBuiltin: Resolve gives every built-in op on every
// element type its kernel (Finish for Avg alone), refuses bitwise ops on
// floats, and allocates nothing: every reducing collective call resolves.
func TestResolveEveryBuiltin(t *testing.T) {
	for _, o := range Builtins {
		for d := Int8; d < numDTypes; d++ {
			k, err := o.Resolve(d)
			bitwise := o == BAnd || o == BOr || o == BXor
			if bitwise && d.IsFloat() {
				require.ErrorIs(t, err, ErrUnsupported, "%v on %v", o, d)
				continue
			}
			require.NoError(t, err, "%v on %v", o, d)
			require.NotNil(t, k.Combine, "%v on %v", o, d)
			require.Equal(t, o, k.Op)
			require.Equal(t, d, k.DType)
			require.Equal(t, o == Avg, k.Finish != nil, "%v on %v: Finish", o, d)
		}
	}
	_, err := Sum.Resolve(numDTypes)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = Op{}.Resolve(Float32)
	require.ErrorIs(t, err, ErrUnsupported)
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = Avg.Resolve(Float64) }))
}

// TestKernelOfSharesKernels: KernelOf answers as Resolve does, for every
// built-in op and element type, a Func op and the errors, but with the
// same shared kernel each time for the ops it knows (no copy, nothing
// allocated: the collectives resolve once a call); NoOp is the kernel
// of the collectives that do not reduce.
func TestKernelOfSharesKernels(t *testing.T) {
	first := Func("first", false, func(inout, in []int32) { copy(inout, in) })
	ops := append(append([]Op(nil), Builtins...), first, Op{})
	for _, o := range ops {
		for d := Int8; d <= numDTypes; d++ {
			want, werr := o.Resolve(d)
			k, err := o.KernelOf(d)
			require.NotNil(t, k, "%v on %v", o, d)
			if werr != nil {
				require.EqualError(t, err, werr.Error(), "%v on %v", o, d)
				continue
			}
			require.NoError(t, err, "%v on %v", o, d)
			require.Equal(t, want.Op, k.Op)
			require.Equal(t, want.DType, k.DType)
			require.Equal(t, want.Finish != nil, k.Finish != nil, "%v on %v: Finish", o, d)
			require.NotNil(t, k.Combine)
			again, _ := o.KernelOf(d)
			require.Same(t, k, again, "%v on %v: a kernel of its own each time", o, d)
		}
	}
	// The shared kernel combines as Resolve's does.
	k, err := first.KernelOf(Int32)
	require.NoError(t, err)
	a := []int32{1, 2}
	k.Combine(Bytes(a), Bytes([]int32{3, 4}))
	require.Equal(t, []int32{3, 4}, a)
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = Avg.KernelOf(Float64) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = first.KernelOf(Int32) }))

	for d := Int8; d < numDTypes; d++ {
		k := NoOp(d)
		require.Equal(t, Kernel{DType: d}, *k)
		require.Same(t, k, NoOp(d))
	}
	require.Equal(t, Kernel{DType: numDTypes}, *NoOp(numDTypes))
}

// TestOpString: every op names itself, a built-in by its code, one from
// Func by the name it was given ("user" when none), the zero Op as
// invalid; an unsupported type names the user op too.
func TestOpString(t *testing.T) {
	for _, tc := range []struct {
		op   Op
		want string
	}{
		{Sum, "sum"}, {Prod, "prod"}, {Min, "min"}, {Max, "max"}, {Avg, "avg"},
		{BAnd, "band"}, {BOr, "bor"}, {BXor, "bxor"}, {LAnd, "land"}, {LOr, "lor"},
		{Func("absmax", true, func(inout, in []float32) {}), "absmax"},
		{Func("", false, func(inout, in []int32) {}), "user"},
		{Op{}, "invalid op"},
	} {
		assert.Equal(t, tc.want, tc.op.String())
	}
	_, err := Func("absmax", true, func(inout, in []float32) {}).Resolve(Float64)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), `op "absmax" was made for float32, used with float64`)
}
