package affinity

import "errors"

// ErrUnsupported is what CPUs and StartPinned return where the system has
// no CPU affinity calls (PinThread and RestoreThread exist on Linux only).
var ErrUnsupported = errors.New("affinity: not supported on this system")
