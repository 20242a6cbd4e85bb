package verbstest

import "testing"

func runPeer(t *testing.T, opts Options) { t.Fatal("TODO") }
func (s *suite) twoProcess(t *testing.T) { t.Skip("TODO") }
