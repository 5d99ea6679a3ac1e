// Package diagnosistest runs `wolf doctor` on the labs and on containers
// and judges its diagnosis the way a reader of the report would: the
// lab's root cause named, its victims and their numbers on the chain,
// other work of the machine allowed to rank before it but not to take the
// lab's victims. Each lab takes tens of seconds; these tests live apart
// from cmd/wolf's so that no test package comes near go test's default
// ten-minute limit.
package diagnosistest
