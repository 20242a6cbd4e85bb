package comm

// WithExit returns o with Abort's way to end the process replaced by exit,
// so that a test can abort a rank of an in-process job without ending the
// test binary.
func WithExit(o Options, exit func(code int)) Options {
	o.exit = exit
	return o
}
