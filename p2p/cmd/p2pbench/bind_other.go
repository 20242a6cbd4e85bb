//go:build !linux

package main

import "github.com/rdmago/rdmago/internal/affinity"

func bindSelf(int, int) error { return affinity.ErrUnsupported }
