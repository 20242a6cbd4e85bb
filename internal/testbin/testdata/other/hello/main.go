// Command hello is a second command of the same base name for testbin's
// own tests.
package main

import "fmt"

func main() { fmt.Println("other hello") }
