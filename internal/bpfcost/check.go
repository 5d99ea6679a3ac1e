package bpfcost

import (
	"context"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Check implements investigator.Checker: the programs on the host can be
// listed, and BPF run statistics turned on (and off again).
func (b *Investigator) Check(ctx context.Context) ([]string, error) {
	if _, err := listPrograms(); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("bpf: listing programs: %w: %w", err, investigator.ErrPrivilege)
		}
		return nil, fmt.Errorf("bpf: listing programs: %w", err)
	}
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return []string{fmt.Sprintf("the kernel would not turn on BPF run statistics (%v, Linux 5.8+): run counts and times read as zero", err)}, nil
	}
	_ = st.Close()
	return nil, nil
}
