//go:build !amd64

package reduce

const useWide = false

func addF32Wide(a, b *float32, n int) { panic("reduce: no wide kernels here") }

func addF64Wide(a, b *float64, n int) { panic("reduce: no wide kernels here") }

func addI32Wide(a, b *uint32, n int) { panic("reduce: no wide kernels here") }

func addI64Wide(a, b *uint64, n int) { panic("reduce: no wide kernels here") }
