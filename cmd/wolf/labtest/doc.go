// Package labtest tests `wolf lab` as a user's shell runs it: every lab
// killed with SIGKILL mid-run and cleaned by the next run, and `wolf lab
// clean` undoing only what dead labs left. Killing each lab takes minutes;
// these tests live apart from cmd/wolf's so that no test package comes near
// go test's default ten-minute limit.
package labtest
