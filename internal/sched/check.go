package sched

import (
	"context"
	"fmt"
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
	_, topoErr := p.readTopology()
	if err := p.attach(); err != nil {
		return nil, err
	}
	lost := append([]string(nil), p.warnings...)
	if topoErr != nil {
		lost = append(lost, fmt.Sprintf("the scheduler's own cache topology not read (%v): only the hardware's is known", topoErr))
	}
	return lost, nil
}
