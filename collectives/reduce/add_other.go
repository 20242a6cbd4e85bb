//go:build !amd64

package reduce

const useWide = false

func addF32Wide(a, b *float32, n int) { panic("reduce: no wide kernels here") }

func addF64Wide(a, b *float64, n int) { panic("reduce: no wide kernels here") }
