package comm

// closePanicking is Close for a rank whose goroutine is panicking: it marks
// the communicator closed and leaves the connections for the process's end
// to break, so the peers see this rank lost, not departed. A goodbye would
// let them end the job while the runtime still prints the trace (the
// launcher then stops this rank mid-trace and blames another), and waiting
// for what this rank sent to drain would hold the trace back for peers
// that wait for this rank. A program that recovers the panic further up
// keeps the connections open until it exits.
func (c *Comm) closePanicking() {
	if c != nil {
		c.closed.Store(true)
	}
}
