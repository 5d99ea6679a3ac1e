package hung

import (
	"context"

	"github.com/wolf-investigator/wolf/internal/kernelbtf"
)

// Check implements investigator.Checker: the programs load and attach,
// and the task iterator runs once.
func (h *Investigator) Check(ctx context.Context) ([]string, error) {
	p, err := openProbe(!h.ignoreBlocker, kernelbtf.External())
	if err != nil {
		return nil, err
	}
	defer p.kit.Close()
	if _, err := p.scan(ctx, nil); err != nil {
		return nil, err
	}
	return p.Notes(), nil
}
