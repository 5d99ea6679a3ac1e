package sched

// Kind is who initiated a migration, as sched.bpf.c classifies it (enum kind).
type Kind int

// The initiators, in the BPF side's order.
const (
	KindWakeup   Kind = iota // wake-up placement, on the waker's CPU
	KindBalance              // the periodic load balancer (SCHED_SOFTIRQ, ksoftirqd)
	KindNewidle              // a CPU going idle pulled the task
	KindStopper              // the migration stopper, migration/N
	KindAffinity             // the task's allowed CPUs changed
	KindOther                // hard irq, RT/DL push-pull, hotplug
	NKinds       = iota
)

// Key is the kind's name in evidence keys and JSON.
func (k Kind) Key() string {
	switch k {
	case KindWakeup:
		return "wakeup"
	case KindBalance:
		return "balance"
	case KindNewidle:
		return "newidle"
	case KindStopper:
		return "stopper"
	case KindAffinity:
		return "affinity"
	default:
		return "other"
	}
}

// Phrase names the initiator for a sentence.
func (k Kind) Phrase() string {
	switch k {
	case KindWakeup:
		return "the wake-up path (placement on the waker's CPU)"
	case KindBalance:
		return "the periodic load balancer (softirq/ksoftirqd)"
	case KindNewidle:
		return "newidle balancing (a CPU going idle pulled it)"
	case KindStopper:
		return "the migration stopper (migration/N: active balancing)"
	case KindAffinity:
		return "changes of its allowed CPUs (affinity or cpuset)"
	default:
		return "other paths (RT/DL push-pull, interrupts, hotplug)"
	}
}
