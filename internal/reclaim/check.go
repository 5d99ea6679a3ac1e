package reclaim

import (
	"context"

	"github.com/wolf-investigator/wolf/internal/memcg"
)

// Check implements investigator.Checker: the programs load and attach.
func (iv *Investigator) Check(ctx context.Context) ([]string, error) {
	_, herr := memcg.Find(ctx, iv.Proc)
	p, err := openProbe(herr == nil, iv.absent, loadSampleRanges(ctx))
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.kit.Notes(), nil
}
