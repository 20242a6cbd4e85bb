// Command hello is a command for testbin's own tests.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Println("hello", os.Args[1:]) }
