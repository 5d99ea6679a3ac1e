package kstack

import "strings"

// FuncName returns the bare kernel symbol of one stack frame, or "" when the
// frame names no symbol (a raw address such as "0xffffffffc11f0000", an
// empty or garbled line).
//
// It accepts every shape a frame takes in the logs wolf reads:
//
//	rwsem_down_write_slowpath+0x2b1/0x560
//	? finish_task_switch.isra.0+0x8f
//	request_wait_answer+0xd0/0x2a0 [fuse]
//	request_wait_answer+0xd0/0x2a0 [fuse 0123abcd…]   (module build id)
//	__schedule (linux/kernel/sched/core.c:5378 …)     (decode_stacktrace.sh)
//	[<ffffffff8108a0b5>] ? wait_for_completion+0x88/0x150   (old x86, arm64)
//
// Compiler clone suffixes (".constprop.0", ".isra.0", ".part.0", ".cold",
// ".llvm.123…") are dropped: the same function shows up under any of them
// depending on the compiler and the kernel build, and every table in this
// package is keyed by the bare name. Callers that want the raw text keep
// the frame itself (Site.Frame does).
func FuncName(frame string) string {
	s := strings.TrimSpace(frame)
	for {
		switch {
		case strings.HasPrefix(s, "?"):
			s = strings.TrimSpace(s[1:])
			continue
		case strings.HasPrefix(s, "[<"):
			// "[<ffffffff8108a0b5>] func": the address block of old
			// x86 and of arm64 traces.
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return ""
			}
			s = strings.TrimSpace(s[end+1:])
			continue
		case strings.HasPrefix(s, "["):
			// A stray bracket glued to the symbol, as copy-pasted logs
			// sometimes have ("[do_exit (linux/kernel/exit.c:433)").
			s = s[1:]
			continue
		}
		break
	}
	if i := strings.IndexAny(s, " \t("); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	// Kernel C symbols never contain a dot; everything after the first
	// one is a compiler clone suffix.
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	if s == "" || strings.HasPrefix(s, "0x") || !isSymbol(s) {
		return ""
	}
	return s
}

// Func is FuncName for people and lists: the bare symbol, or the frame as
// it is when it names no symbol (a raw address such as
// "0xffffffffc11f0000", which says more than nothing).
func Func(frame string) string {
	if name := FuncName(frame); name != "" {
		return name
	}
	return strings.TrimSpace(frame)
}

// FlameName is a frame as flame graphs and the folded format show it: the
// offset and compiler clone suffix dropped, so that samples at different
// instructions of one function merge, and the module kept
// ("tcp_collapse.isra.0+0x4b7/0x5a0 [mod]" → "tcp_collapse [mod]"). A frame
// that is not a symbol with an offset (a raw address, a profile's synthetic
// root such as "stress (pid 7)") is returned unchanged.
func FlameName(frame string) string {
	i := strings.Index(frame, "+0x")
	if i <= 0 {
		return frame
	}
	name, rest := frame[:i], frame[i:]
	if j := strings.IndexByte(name, '.'); j > 0 && isSymbol(name[:j]) {
		name = name[:j]
	}
	if j := strings.IndexByte(rest, ' '); j > 0 {
		return name + rest[j:]
	}
	return name
}

// isSymbol reports whether s looks like a C (or Rust-mangled) symbol, so
// that free text that happens to sit where a frame is expected is not taken
// for a function name.
func isSymbol(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '$':
		case c >= '0' && c <= '9':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// Unreliable reports whether the unwinder marked the frame with "?": a
// return address found on the stack that may be stale, so it says nothing
// about what the task is doing now.
func Unreliable(frame string) bool {
	s := strings.TrimSpace(frame)
	if strings.HasPrefix(s, "[<") {
		if end := strings.IndexByte(s, ']'); end >= 0 {
			s = strings.TrimSpace(s[end+1:])
		}
	}
	return strings.HasPrefix(s, "?")
}
