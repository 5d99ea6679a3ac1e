package hunglog

// buildChains follows owners that are blocked themselves: A waits for X
// held by B, B waits for Y held by C. The chain ends at a task that is not
// blocked, at one whose lock the log does not resolve, or back at a victim:
// then it is a deadlock and is said as such.
func buildChains(a *Analysis, byPID map[int]*Report) {
	groupOf := map[int]*Group{}
	for i := range a.Groups {
		for _, v := range a.Groups[i].Victims {
			if v.PID > 0 {
				groupOf[v.PID] = &a.Groups[i]
			}
		}
	}
	for i := range a.Groups {
		g := &a.Groups[i]
		if g.Owner == nil {
			continue
		}
		seen := map[int]bool{}
		for _, v := range g.Victims {
			seen[v.PID] = true
		}
		cur := g
		for step := 0; step < maxChain && cur != nil && cur.Owner != nil; step++ {
			o := cur.Owner
			g.Chain = append(g.Chain, ChainLink{Holder: o, Lock: lockName(cur), group: cur})
			if seen[o.PID] {
				g.Deadlock = true
				break
			}
			seen[o.PID] = true
			next := groupOf[o.PID]
			if next == cur {
				break
			}
			cur = next
		}
	}
}

// maxChain bounds a wait chain: real ones are two or three long.
const maxChain = 8
