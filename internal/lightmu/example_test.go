package lightmu_test

import (
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/internal/lightmu"
)

func Example() {
	var mu lightmu.Mutex
	var n int
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println(n)
	// Output: 4000
}
