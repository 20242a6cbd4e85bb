// Package ranklist writes a list of ranks the way people read it, for
// error messages of every layer:
//
//	ranklist.Format([]int{0, 2, 5, 6, 7}) // "ranks 0, 2 and 5-7"
package ranklist
