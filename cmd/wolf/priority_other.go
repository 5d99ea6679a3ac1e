//go:build !linux

package main

import "github.com/spf13/cobra"

// priorityFlag: only Linux wolf has commands whose priority it raises (the
// live ones); elsewhere they only say they need Linux.
type priorityFlag struct{}

func (*priorityFlag) register(*cobra.Command)    {}
func (*priorityFlag) apply(*cobra.Command) error { return nil }
