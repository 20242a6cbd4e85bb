package reduce

import (
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// ErrUnsupported is returned when an op is not defined for an element type
// (bitwise ops on floats, a user function written for another type).
// It is verbs.ErrUnsupported: the layers above share it.
var ErrUnsupported = verbs.ErrUnsupported

// OpCode identifies a built-in op (and OpUser) on the wire and in fingerprints.
type OpCode uint8

const (
	OpNone OpCode = iota
	OpSum
	OpProd
	OpMin
	OpMax
	OpAvg
	OpBAnd
	OpBOr
	OpBXor
	OpLAnd
	OpLOr
	OpUser
)

var opNames = [...]string{"none", "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "land", "lor", "user"}

func (c OpCode) String() string {
	if int(c) < len(opNames) {
		return opNames[c]
	}
	return fmt.Sprintf("OpCode(%d)", uint8(c))
}

// Op is a reduction operation. The built-in ops are plain values that work
// for every element type they make sense for; user ops come from Func. The
// zero Op is invalid.
//
// It is two words (a user op's name lives with its function), so that the
// copies every collective call makes of it stay in registers: a larger Op
// went through memory, and the copy's wide loads of fields stored just
// before waited for those stores.
type Op struct {
	code        OpCode
	commutative bool
	user        *userFunc // set for OpUser (with its name); a pointer keeps Op comparable
}

// The built-in ops. Integer Sum and Prod wrap around as Go arithmetic does.
// Min and Max on floats propagate NaN (Go's min/max). Avg is Sum followed by
// a division by the number of contributions (integer division truncates).
// Logical ops treat non-zero as true and produce 1 or 0. Bitwise ops are
// defined for integer types only.
var (
	Sum  = Op{code: OpSum, commutative: true}
	Prod = Op{code: OpProd, commutative: true}
	Min  = Op{code: OpMin, commutative: true}
	Max  = Op{code: OpMax, commutative: true}
	Avg  = Op{code: OpAvg, commutative: true}
	BAnd = Op{code: OpBAnd, commutative: true}
	BOr  = Op{code: OpBOr, commutative: true}
	BXor = Op{code: OpBXor, commutative: true}
	LAnd = Op{code: OpLAnd, commutative: true}
	LOr  = Op{code: OpLOr, commutative: true}
)

// Builtins lists the built-in ops, for tests and tools.
var Builtins = []Op{Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor, LAnd, LOr}

// Func makes a user-defined op for element type T. f must set
// inout[i] = inout[i] ⊕ in[i] for every i, where inout holds the
// contribution of the lower ranks; it must be associative. When commutative
// is false the collectives keep rank order (they pick order-preserving
// algorithms). f must not retain the slices.
func Func[T Element](name string, commutative bool, f func(inout, in []T)) Op {
	if name == "" {
		name = "user"
	}
	if f == nil {
		return Op{} // invalid: Resolve reports it
	}
	u := &userFunc{name: name}
	o := Op{code: OpUser, user: u, commutative: commutative}
	u.kernel = Kernel{Combine: func(inout, in []byte) { f(View[T](inout), View[T](in)) }, Op: o, DType: DTypeOf[T]()}
	return o
}

// Code is the op's identity on the wire.
func (o Op) Code() OpCode { return o.code }

// Commutative reports whether operands may be combined in any order.
func (o Op) Commutative() bool { return o.commutative }

// Valid reports whether o is a built-in op or came from Func.
func (o Op) Valid() bool { return o.code > OpNone && o.code <= OpUser }

func (o Op) String() string {
	switch {
	case o.code == OpNone:
		return "invalid op"
	case o.user != nil:
		return o.user.name
	}
	return o.code.String()
}

// Kernel is an op resolved for one element type, working on byte views of
// element slices (see Bytes).
type Kernel struct {
	// Combine sets inout = inout ⊕ in element-wise; len(in) == len(inout).
	Combine func(inout, in []byte)
	// Finish, when not nil, must run once on the final result: Avg divides
	// by n, the number of contributions.
	Finish func(buf []byte, n int)
	Op     Op
	DType  DType
}

// Resolve finds o's kernel for dt, or an error wrapping ErrUnsupported.
func (o Op) Resolve(dt DType) (Kernel, error) {
	k, err := o.KernelOf(dt)
	return *k, err
}

// KernelOf is Resolve without the copy: the kernel of a built-in op or of
// one made by Func, shared and not to be modified. Built-in ops on the
// types they take are a table look-up (every reducing collective call
// resolves its op); a built-in code can only be its package variable's,
// the fields being unexported. Otherwise it returns a kernel of its own
// with the reason there is none.
func (o Op) KernelOf(dt DType) (*Kernel, error) {
	switch {
	case o.code > OpNone && o.code < OpUser && dt < numDTypes && kernels[o.code][dt].Combine != nil:
		return &kernels[o.code][dt], nil
	case o.code == OpUser && o.user != nil && o.user.kernel.DType == dt:
		return &o.user.kernel, nil
	}
	return &Kernel{Op: o, DType: dt}, o.unsupported(dt)
}

// unsupported is why o has no kernel for dt (the table holds every
// built-in op on every type it takes).
func (o Op) unsupported(dt DType) error {
	switch {
	case !o.Valid():
		return fmt.Errorf("%w: invalid (zero) op", ErrUnsupported)
	case dt.Size() == 0:
		return fmt.Errorf("%w: invalid element type %v", ErrUnsupported, dt)
	case o.code == OpUser && o.user != nil:
		return fmt.Errorf("%w: op %q was made for %v, used with %v", ErrUnsupported, o.user.name, o.user.kernel.DType, dt)
	case dt.IsFloat() && (o.code == OpBAnd || o.code == OpBOr || o.code == OpBXor):
		return fmt.Errorf("%w: bitwise %v on %v", ErrUnsupported, o, dt)
	}
	return fmt.Errorf("%w: %v on %v", ErrUnsupported, o, dt)
}

// NoOp is the kernel of collectives that do not reduce, for elements of
// type dt: no op, no Combine; shared and not to be modified.
func NoOp(dt DType) *Kernel {
	if dt < numDTypes {
		return &kernels[OpNone][dt]
	}
	return &Kernel{DType: dt}
}

// Reduce sets inout = inout ⊕ in with op, for callers that hold typed slices.
// It applies no Finish (Avg behaves as Sum here).
func Reduce[T Element](op Op, inout, in []T) error {
	if len(inout) != len(in) {
		return fmt.Errorf("reduce: length mismatch: inout has %d elements, in has %d", len(inout), len(in))
	}
	k, err := op.Resolve(DTypeOf[T]())
	if err != nil {
		return err
	}
	k.Combine(Bytes(inout), Bytes(in))
	return nil
}

// userFunc is what Func made: the op's name and its kernel (KernelOf's
// answer for the element type it was made for, kernel.DType).
type userFunc struct {
	name   string
	kernel Kernel
}

// kernels is Resolve's result for every built-in op and element type it
// takes (zero elsewhere), made once from builtins.
var kernels = func() (t [OpUser][numDTypes]Kernel) {
	for d := range numDTypes {
		t[OpNone][d] = Kernel{DType: d} // NoOp
	}
	for _, o := range []Op{Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor, LAnd, LOr} {
		for d := Int8; d < numDTypes; d++ {
			if d.IsFloat() && (o.code == OpBAnd || o.code == OpBOr || o.code == OpBXor) || builtins[o.code][d] == nil {
				continue
			}
			t[o.code][d] = Kernel{Combine: builtins[o.code][d], Op: o, DType: d}
			if o.code == OpAvg {
				t[o.code][d].Finish = divider(d)
			}
		}
	}
	return t
}()

// builtins holds every built-in kernel, made once: Resolve runs on every
// collective call and must not allocate.
var builtins = func() (t [OpUser][numDTypes]func(inout, in []byte)) {
	for c := OpSum; c < OpUser; c++ {
		for d := Int8; d < numDTypes; d++ {
			if d.IsFloat() && (c == OpBAnd || c == OpBOr || c == OpBXor) {
				continue
			}
			t[c][d] = builtin(c, d)
		}
	}
	return t
}()
