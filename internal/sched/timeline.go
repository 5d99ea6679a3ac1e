package sched

import (
	"sort"
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// DefaultTimelineLen is how many of its latest migrations the BPF side keeps
// per task: at a storm's 1,000 moves a second, the last tenth of a second;
// at the rates of "The Network Is Slow", the whole window.
const DefaultTimelineLen = 128

// Migration is one move of a task, as the timeline ring kept it.
type Migration struct {
	At       time.Duration // since the window started
	From, To int
	Kind     Kind
}

// Timeline is a task's migrations over the window: a step chart of the CPU
// it was on, each step labelled with its initiator. The first point is
// the CPU it left at its first kept move, at that move's time. Moves the
// ring did not keep (its first three, those older than the latest
// DefaultTimelineLen, those evicted when the map was full) are counted in
// Dropped.
func Timeline(t *Task, moves []Migration) finding.Timeline {
	sort.Slice(moves, func(i, j int) bool { return moves[i].At < moves[j].At })
	tl := finding.Timeline{
		Name: "migrations",
		Unit: "cpu",
		Labels: map[string]string{
			"tid":  strconv.Itoa(t.TID),
			"pid":  strconv.Itoa(t.PID),
			"comm": t.Comm,
		},
	}
	if t.Migrations > uint64(len(moves)) {
		tl.Dropped = t.Migrations - uint64(len(moves))
	}
	for i, m := range moves {
		at := m.At.Seconds()
		if i == 0 {
			tl.Events = append(tl.Events, finding.TimelineEvent{AtS: at, Value: float64(m.From), Label: "first kept move"})
		}
		tl.Events = append(tl.Events, finding.TimelineEvent{AtS: at, Value: float64(m.To), Label: m.Kind.Key()})
	}
	return tl
}

// Timelines are the migration timelines of the tasks findings name (the
// movers), busiest first; tasks with no kept move have none.
func Timelines(tasks []*Task, moves map[int][]Migration, named map[int]bool) []finding.Timeline {
	var ts []*Task
	for _, t := range tasks {
		if named[t.TID] && len(moves[t.TID]) > 0 {
			ts = append(ts, t)
		}
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Migrations != ts[j].Migrations {
			return ts[i].Migrations > ts[j].Migrations
		}
		return ts[i].TID < ts[j].TID
	})
	var out []finding.Timeline
	for _, t := range ts {
		out = append(out, Timeline(t, moves[t.TID]))
	}
	return out
}
