package comm

// The transports FromEnv and Init can name. ibv is a stub that reports
// verbs.ErrUnavailable unless the program is built with -tags rdma.
import (
	_ "github.com/rdmago/rdmago/verbs/ibv"
	_ "github.com/rdmago/rdmago/verbs/loop"
	_ "github.com/rdmago/rdmago/verbs/shm"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)
