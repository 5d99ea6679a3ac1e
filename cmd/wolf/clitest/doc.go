// Package clitest runs each investigator's acceptance test through the
// CLI, as a user's shell would: a lab induces the pathology and `wolf
// hung`, `reclaim`, `locks` or `softirq` in a separate process must name
// it. Labs take tens of seconds each on a busy machine; these tests live
// apart from cmd/wolf's so that no test package comes near go test's
// default ten-minute limit.
package clitest
