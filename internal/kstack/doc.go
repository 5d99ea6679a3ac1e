// Package kstack is wolf's handling of kernel stacks, shared by the
// investigators, the log analyzer and the exports:
//
//   - frame names: FuncName (the bare symbol, for tables keyed by
//     function), Func (the same for lists people read) and FlameName
//     (offset and clone suffix dropped, module kept, for flame graphs);
//   - the folded format of flame graph tools (FoldedStack, FoldedLine);
//   - wait sites: what a blocked task waits on, read from its stack
//     (Classify).
//
// Wait sites exist because the hung-task report names the victim, not the
// thing it waits for: the interesting frames hide under scheduler plumbing,
// unreliable "?" frames and lock slow paths, and the same wait looks
// different on every kernel build (inlined wrappers, clone suffixes,
// tail calls). Classify turns any of those shapes into one Site, and
// Site.Key lets callers put tasks that wait on the same thing together,
// which is how three unrelated-looking stacks in rtnetlink_rcv_msg,
// dev_ethtool and bonding_show_bonds become "3 tasks behind rtnl_mutex".
//
// It is pure string work: the live investigators (BPF stacks, symbolized)
// and the offline log analyzer (dmesg text) both use it.
package kstack
