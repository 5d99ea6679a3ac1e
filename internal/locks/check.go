package locks

import (
	"context"
	"slices"
)

// Check implements investigator.Checker: the programs load and attach
// (with the profile under lock, as a run with the defaults does).
func (l *Investigator) Check(ctx context.Context) ([]string, error) {
	mask, err := ParseTypes(l.Types)
	if err != nil {
		return nil, err
	}
	p, err := openProbe(config{TypeMask: mask, HoldThreshold: uint64(DefaultHoldThreshold), ProfileHz: l.ProfileHz, rawOnly: l.rawOnly})
	if err != nil {
		return nil, err
	}
	defer p.close()
	return append(slices.Clone(p.notes), p.kit.Notes()...), nil
}
