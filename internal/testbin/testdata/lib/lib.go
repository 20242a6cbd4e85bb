// Package lib is not a command: testbin.Build must refuse it.
package lib

// X is here so that the package is not empty.
var X = 1
