package hunglog

// Stack frames as the architectures and eras print them, turned into the
// one form kstack reads ("func+0x1f/0x40 [module]", "? func+0x…").

import (
	"regexp"
	"strings"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

var (
	// ARM: "[<c0607cfc>] (__schedule) from [<c060811c>] (schedule+0x40/0xa0)",
	// 5.10+ without the leading address, and the tail cut short.
	armFrameRe = regexp.MustCompile(`^(?:\[<[0-9a-f]+>\] )?\(([^()]+)\) from \[<[0-9a-f]+>\](?: \(([^()]+)\))?`)
	// PowerPC: "[c000000049a87780] [c000000001385b4c] __schedule+0x3cc/0xed0",
	// "… 0xc000001001237c80 (unreliable)".
	ppcFrameRe = regexp.MustCompile(`^\[[0-9a-f]{8,16}\] \[[0-9a-f]{8,16}\] (.+)$`)
	// syzbot's decoded frames: "context_switch kernel/sched/core.c:5178 [inline]".
	decodedRe = regexp.MustCompile(`^\S+ [\w./-]+\.[chS]:\d+(?: \[inline\])?$`)
)

// isTraceStart reports the line that opens a stack trace.
func isTraceStart(t string) bool {
	return t == "Call Trace:" || t == "Call trace:" || t == "Backtrace:" || strings.HasPrefix(t, "Call Trace:") && len(t) < 16
}

// parseFrame returns the frames one trace line holds, in the common form;
// nil when the line is not a frame. An ARM line names two functions, the
// one running and its caller: the first line of a trace gives both, later
// lines only the caller (the running one is the previous line's caller).
func parseFrame(t string, c *collector) []string {
	if m := armFrameRe.FindStringSubmatch(t); m != nil {
		c.arm = true
		var out []string
		first := strings.TrimSpace(m[1])
		if c.lastFrame == "" || kstack.FuncName(c.lastFrame) != kstack.FuncName(first) {
			out = append(out, first)
		}
		if m[2] != "" {
			out = append(out, strings.TrimSpace(m[2]))
			c.lastFrame = out[len(out)-1]
		} else {
			c.lastFrame = first
		}
		return out
	}
	if m := ppcFrameRe.FindStringSubmatch(t); m != nil {
		f := m[1]
		if rest, ok := strings.CutSuffix(f, " (unreliable)"); ok {
			f = "? " + rest
		}
		if !isFrameText(f) {
			return nil
		}
		return []string{f}
	}
	if isFrameText(t) {
		return []string{t}
	}
	return nil
}

// isFrameText reports whether a line inside a trace is a stack frame.
func isFrameText(t string) bool {
	s := strings.TrimSpace(strings.TrimPrefix(t, "?"))
	if isHexAddr(s) {
		return true // "? 0xffffffffc11f0000": a frame with no symbol
	}
	name := kstack.FuncName(t)
	if name == "" {
		return false
	}
	switch {
	case strings.Contains(t, "+0x"):
		return true
	case decodedRe.MatchString(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "?"))):
		return true
	case strings.Contains(t, " ("):
		// decode_stacktrace.sh: "func (path/file.c:123 …)".
		_, loc, _ := strings.Cut(t, " (")
		return strings.Contains(loc, ".c:") || strings.Contains(loc, ".h:") ||
			strings.Contains(loc, ".S:") || strings.Contains(loc, ".rs:")
	}
	// A bare symbol on its own (decoded output without line info).
	return !strings.ContainsAny(strings.TrimLeft(t, "?[ "), " \t")
}

func isHexAddr(s string) bool {
	if !strings.HasPrefix(s, "0x") || len(s) < 3 || len(s) > 18 {
		return false
	}
	return isHex(s[2:])
}

// isNoise reports lines inside a task block that are neither frames nor
// the end of the block: register dumps, raw stack words, exception stacks.
// They must not count as stray lines, or a long register dump would end a
// report early.
func isNoise(t string) bool {
	return isRegisterLine(t) || isStackWords(t) || t == "..." ||
		strings.HasPrefix(t, "Exception stack(") || strings.HasPrefix(t, "Instruction dump:") ||
		isHexDumpLine(t)
}

// isRegisterLine reports register dump lines ("RIP: 0033:0x1ce792e",
// "RAX: ffffffffffffffda RBX: …", "Code: …", arm64 "pc : …", ARM
// "r10:e587a000 r9:00000000", PowerPC "GPR00: …", "NIP [c…] f+0x…")
// that sysrq prints at the end of a user task's trace.
func isRegisterLine(t string) bool {
	f, _, _ := strings.Cut(t, " ")
	switch f {
	case "pc", "lr", "sp", "NIP", "LR", "CTR", "MSR:", "REGS:", "CFAR:", "CR:", "XER:":
		return true
	}
	if len(f) >= 3 && f[0] == 'r' && strings.Contains(f, ":") {
		reg, _, _ := strings.Cut(f[1:], ":")
		if allDigits(reg) {
			return true // ARM "r10:e587a000"
		}
	}
	if !strings.HasSuffix(f, ":") || len(f) < 3 || len(f) > 6 {
		return false
	}
	for i := 0; i < len(f)-1; i++ {
		c := f[i]
		if !(c >= 'A' && c <= 'Z') && !isDigit(c) && c != 'x' {
			if f[:len(f)-1] != "Code" {
				return false
			}
		}
	}
	return true
}

// isStackWords reports a line of raw stack words ("ffff8801bc073040
// ffff8800b9488d40 …", MIPS "8c031e44 8c031e40 …").
func isStackWords(t string) bool {
	f := strings.Fields(t)
	if len(f) < 2 {
		return false
	}
	for _, w := range f {
		if (len(w) != 8 && len(w) != 16) || !isHex(w) {
			return false
		}
	}
	return true
}

// isHexDumpLine reports an ARM exception stack line: "bfa0:  019fec50 …".
func isHexDumpLine(t string) bool {
	addr, rest, ok := strings.Cut(t, ": ")
	return ok && len(addr) == 4 && isHex(addr) && isStackWords(rest+" 00000000")
}
