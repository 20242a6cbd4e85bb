// Package reduce holds rdmago's element types and reduction kernels: the
// DType of every Go numeric type plus BFloat16 and Float16, the built-in ops
// (Sum, Prod, Min, Max, Avg, bitwise And/Or/Xor, logical And/Or), user ops
// made with Func, and the []T ↔ []byte view (Bytes, View) the collectives
// use to move typed data as bytes.
//
//	a := []float32{1, 2, 3}
//	b := []float32{10, 20, 30}
//	if err := reduce.Reduce(reduce.Sum, a, b); err != nil { ... } // a == {11, 22, 33}
//
//	k, err := reduce.Max.Resolve(reduce.DTypeOf[int16]()) // byte-level kernel
//	k.Combine(reduce.Bytes(x), reduce.Bytes(y))
//
// 16-bit floats are widened to float32, combined there and rounded back to
// nearest, ties to even, at every combining step. Kernels are safe for
// concurrent use; they never allocate.
package reduce
