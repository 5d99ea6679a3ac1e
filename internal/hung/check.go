package hung

import "context"

// Check implements investigator.Checker: the programs load and attach,
// and the task iterator runs once.
func (h *Investigator) Check(ctx context.Context) ([]string, error) {
	p, err := openProbe(!h.ignoreBlocker)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if _, err := p.scan(ctx, nil); err != nil {
		return nil, err
	}
	return append([]string(nil), p.warnings...), nil
}
