package investigator

import "context"

// Checker is implemented by investigators that can prove they run here:
// Check loads their own BPF objects, attaches them, and closes everything
// again, so that `wolf check` says "ready" only when that worked. Lost
// lists what the investigator runs without on this kernel, in the words
// its report's notes use; an error says why it cannot run at all.
type Checker interface {
	Check(ctx context.Context) (lost []string, err error)
}
