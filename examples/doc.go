// Package examples holds small, real rdmago programs, one per directory, each
// runnable in one line from the repository root:
//
//	go run ./cmd/rdmarun -np 4 ./examples/hello     # rank, size, host, transport per peer
//	go run ./cmd/rdmarun -np 4 ./examples/ring      # a token passed around the ranks
//	go run ./cmd/rdmarun -np 4 ./examples/allreduce # vector sum, checked
//	go run ./cmd/rdmarun -np 4 ./examples/heat      # 2-D Jacobi with halo exchange vs serial
//	go run ./cmd/rdmarun -np 4 ./examples/halo-put  # 1-D heat, halos by one-sided PutSignal vs serial
//	go run ./cmd/rdmarun -np 4 ./examples/cg        # conjugate gradient on a row-split matrix vs gonum
//	go run ./cmd/rdmarun -np 4 ./examples/sgd       # data-parallel SGD vs the serial run
//	go run ./cmd/rdmarun -np 4 --keep-going ./examples/shrink -kill-rank 2 -kill-iter 20
//	                                                 # loses a rank, shrinks, finishes exactly
//
// Every example prints one result line that ends in "OK" when its answer was
// checked and found right, and exits with status 1 (printing "FAIL") when
// not. examples_test.go runs each under the real rdmarun with 1, 2 and 4
// ranks and checks those lines.
package examples
