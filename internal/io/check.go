package io

import (
	"context"
	"fmt"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Check implements investigator.Checker: the programs load and the
// request programs attach (the waiter programs load; they attach only
// when needed).
func (iv *Investigator) Check(ctx context.Context) ([]string, error) {
	p, err := openProbe(ctx, config{SlowRequest: DefaultSlowRequest, LongWait: DefaultLongWait}, nil)
	if err != nil {
		return nil, err
	}
	defer p.close()
	notes := p.kit.Notes()
	if p.insertErr != nil {
		notes = append(notes, fmt.Sprintf("block_rq_insert did not attach (%v): a request that waits in a scheduler is followed from its issue", p.insertErr))
	}
	if !p.throttle {
		notes = append(notes, "blk-throttle's dispatch function is not in kallsyms: requests it held are not told apart")
	}
	return notes, nil
}

// Requirements implements investigator.Requirer.
func (*Investigator) Requirements() []investigator.Requirement {
	reqs := []investigator.Requirement{
		{Feature: "btf", Why: "CO-RE: read requests, bios and their cgroups on any kernel layout"},
		{Feature: "tp_btf", Why: "attach to the block request tracepoints with typed arguments: direct reads on the hot path"},
	}
	reqs = append(reqs, probekit.Requirements(attachTable(kernelQueueFirst(), haveTaskBTF()))...)
	return append(reqs,
		investigator.Requirement{Feature: "cgroup_v1", Why: "v1 blkio.throttle.* limits of the cgroups whose I/O was held", Optional: true},
		investigator.Requirement{Feature: "cgroup_v2", Why: "v2 io.max and io.latency limits of the cgroups whose I/O was held", Optional: true},
	)
}
