package sched

import (
	"context"
	"os"
)

// Check implements investigator.Checker: the programs load, the topology
// program runs, the tracepoints attach and the task iterator is created.
func (s *Investigator) Check(ctx context.Context) ([]string, error) {
	p, err := openProbe(config{BounceWindowNs: uint64(DefaultBounceWindow), SelfTGID: uint32(os.Getpid()), NoTaskStorage: s.noTaskStorage})
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.notesNow(), nil
}
