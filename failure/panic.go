package failure

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Panicked is the underlying error of a model call that panicked
// (Protect): the panic's value and the stack where it was recovered,
// which includes where it happened. It is for the log only.
type Panicked struct {
	Value any
	Stack []byte
}

func (p *Panicked) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Stack returns the stack of a panic Protect turned into err, or nil
// when err is not one.
func Stack(err error) []byte {
	var p *Panicked
	if errors.As(err, &p) {
		return p.Stack
	}
	return nil
}

// Protect calls f and returns what it returns; a panic in f is returned
// as a Permanent *Error instead of ending the process. A panic is a bug,
// in Baton or in a model's code: the same call would panic again, so it
// is not worth a retry, and the task, planning or summary that made it
// fails, while every other run goes on. Its value and stack stay in Err
// (Panicked), for the log; a client is told only that an internal error
// occurred.
func Protect[T any](f func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Type: Permanent, Message: "an internal error occurred (a panic)",
				Err: &Panicked{Value: p, Stack: debug.Stack()}}
		}
	}()
	return f()
}
