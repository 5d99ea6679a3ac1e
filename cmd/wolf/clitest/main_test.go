package clitest

import (
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// wolfBin is the wolf binary, built once for every test here.
var wolfBin string

func TestMain(m *testing.M) { wolfcli.Main(m, &wolfBin) }

func runWolf(t *testing.T, timeout time.Duration, args ...string) wolfcli.Result {
	t.Helper()
	return wolfcli.Run(t, wolfBin, timeout, args...)
}
