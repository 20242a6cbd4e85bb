package comm

import "io"

// WithExit returns o with Abort's way to end the process replaced by exit,
// so that a test can abort a rank of an in-process job without ending the
// test binary.
func WithExit(o Options, exit func(code int)) Options {
	o.exit = exit
	return o
}

// WithStatusOutput returns o with the stuck-job report going to out.
func WithStatusOutput(o Options, out io.Writer) Options {
	o.statusOut = out
	return o
}

// StatusRounds is how many times rank 0's stuck-job watch has asked the
// ranks (0 on other ranks).
func StatusRounds(c *Comm) int64 {
	if c.w.status == nil {
		return 0
	}
	return c.w.status.rounds.Load()
}
