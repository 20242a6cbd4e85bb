//go:build !linux

package shmsync

func asymmetric() bool { return false }

func fenceHeavy() bool { return false }
