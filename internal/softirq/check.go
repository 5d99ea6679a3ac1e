package softirq

import "context"

// Check implements investigator.Checker: the programs load and attach,
// stack sampling included.
func (inv *Investigator) Check(ctx context.Context) ([]string, error) {
	hz := inv.SampleHz
	if hz <= 0 {
		hz = DefaultSampleHz
	}
	p, err := openProbe(probeConfig{Threshold: DefaultThreshold, SampleHz: hz})
	if err != nil {
		return nil, err
	}
	defer p.close()
	return p.kit.Notes(), nil
}
