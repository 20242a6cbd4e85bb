package reduce

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"
)

// Element is every element type the collectives move and reduce: Go's
// integer and floating-point types (and named types over them), plus
// BFloat16 and Float16. The two 16-bit float types are named uint16 types, so
// they are already covered by ~uint16; DTypeOf tells them apart by name.
type Element interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// number is Element minus the 16-bit float types' special meaning: the
// generic kernels use Go arithmetic on it.
type number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// BFloat16 is the "brain" 16-bit float: the upper half of a float32 (1 sign,
// 8 exponent, 7 mantissa bits). Reductions compute in float32 and round back
// to nearest, ties to even.
type BFloat16 uint16

// Float16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits).
// Reductions compute in float32 and round back to nearest, ties to even.
type Float16 uint16

// DType names an element type on the wire and in fingerprints.
type DType uint8

const (
	Invalid DType = iota
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float32
	Float64
	BF16
	F16
	numDTypes
)

var dtypeNames = [...]string{"invalid", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bfloat16", "float16"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the element size in bytes (0 for Invalid).
func (d DType) Size() int {
	switch d {
	case Int8, Uint8:
		return 1
	case Int16, Uint16, BF16, F16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// IsFloat reports whether d is a floating-point type (16-bit ones included).
func (d DType) IsFloat() bool { return d == Float32 || d == Float64 || d == BF16 || d == F16 }

// DTypeOf maps T to its DType. int, uint and uintptr map to the fixed-size
// type of their width; named types map to their underlying type, except
// BFloat16 and Float16.
func DTypeOf[T Element]() DType {
	var z T
	// The predeclared types first: every collective call asks, and a type
	// switch is a few compares where reflect costs a call and a lookup.
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case BFloat16:
		return BF16
	case Float16:
		return F16
	}
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return Int8
	case reflect.Int16:
		return Int16
	case reflect.Int32:
		return Int32
	case reflect.Int64:
		return Int64
	case reflect.Uint8:
		return Uint8
	case reflect.Uint16:
		return Uint16
	case reflect.Uint32:
		return Uint32
	case reflect.Uint64:
		return Uint64
	case reflect.Float32:
		return Float32
	case reflect.Float64:
		return Float64
	case reflect.Int:
		if unsafe.Sizeof(z) == 8 {
			return Int64
		}
		return Int32
	case reflect.Uint, reflect.Uintptr:
		if unsafe.Sizeof(z) == 8 {
			return Uint64
		}
		return Uint32
	}
	return Invalid
}

// Float32 widens b exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// BFloat16From rounds f to the nearest BFloat16, ties to even. NaNs stay NaN
// (quiet), infinities stay infinite, overflow rounds to infinity.
func BFloat16From(f float32) BFloat16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return BFloat16(u>>16 | 0x0040)
	}
	u += 0x7fff + (u>>16)&1
	return BFloat16(u >> 16)
}

// Float32 widens h exactly.
func (h Float16) Float32() float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: value = man · 2^-24, exact in float32.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// Float16From rounds f to the nearest Float16, ties to even, with gradual
// underflow to subnormals and overflow to infinity. NaNs stay NaN (quiet).
func Float16From(f float32) Float16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return Float16(sign | 0x7e00 | uint16(a>>13)&0x1ff)
	case a >= 0x477ff000: // ≥ 65520 rounds to infinity (65504 is the largest finite)
		return Float16(sign | 0x7c00)
	case a >= 0x38800000: // normal half range (≥ 2^-14)
		// Rebias the exponent (127 → 15) and round the 13 dropped bits.
		v := a - 0x38000000
		v += 0x0fff + (v>>13)&1
		return Float16(sign | uint16(v>>13))
	case a < 0x33000000: // < 2^-25: rounds to zero (2^-25 itself is a tie to even 0)
		return Float16(sign)
	}
	// Subnormal half: value = m · 2^-24 with m in [0, 1024]; shift the full
	// 24-bit significand right and round to nearest even.
	exp := a >> 23
	man := a&0x7fffff | 0x800000
	shift := 126 - exp // exp in [102, 112] → shift 14..24
	res := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && res&1 == 1 {
		res++
	}
	return Float16(sign | uint16(res))
}
