package thiscpu

// ID is the CPU the calling thread runs on, or -1 when it cannot tell.
func ID() int { return id() }
