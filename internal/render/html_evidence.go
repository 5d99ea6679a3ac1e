// The evidence of a finding, shaped for the HTML template: scalars, lists,
// tables and records.

package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/wolf-investigator/wolf/internal/human"
)

// evNode is one evidence value, shaped for the template: a scalar, a list
// of scalars, a table (a list of records), or a record (key/value rows).
type evNode struct {
	Scalar string
	// Human is Scalar humanised by the unit its key names (max_wait_ns
	// 811885583 → 812 ms), shown with the raw value beside; "" when the
	// raw value reads as well.
	Human   string
	Scalars []string
	Columns []string
	Rows    [][]*evNode
	Fields  []evField
	Kind    string // "scalar", "list", "table", "record", "empty"
	// Long lists and tables fold away behind their size.
	Collapse bool
}

type evField struct {
	Key   string
	Value *evNode
}

// evidenceNode turns free-form evidence (numbers, strings, slices of
// records, maps) into evNodes. It goes through JSON first, so that what
// the page shows is exactly what --format json would have said.
func evidenceNode(m map[string]any) *evNode {
	if len(m) == 0 {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return &evNode{Kind: "scalar", Scalar: fmt.Sprintf("(unprintable evidence: %v)", err)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep addresses and counters exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return &evNode{Kind: "scalar", Scalar: fmt.Sprintf("(unprintable evidence: %v)", err)}
	}
	return toEvNode(v, 0, "")
}

const (
	evMaxDepth = 5
	evFoldRows = 10
)

// toEvNode shapes v; key is the name v has in its record or table column
// ("" when none), whose unit humanises numbers.
func toEvNode(v any, depth int, key string) *evNode {
	switch x := v.(type) {
	case nil:
		return &evNode{Kind: "scalar", Scalar: "null"}
	case map[string]any:
		if depth >= evMaxDepth {
			return jsonNode(x)
		}
		if len(x) == 0 {
			return &evNode{Kind: "empty"}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := &evNode{Kind: "record"}
		for _, k := range keys {
			n.Fields = append(n.Fields, evField{Key: k, Value: toEvNode(x[k], depth+1, k)})
		}
		return n
	case []any:
		if len(x) == 0 {
			return &evNode{Kind: "empty"}
		}
		if depth >= evMaxDepth {
			return jsonNode(x)
		}
		scalars := true
		records := true
		for _, e := range x {
			switch e.(type) {
			case map[string]any:
				scalars = false
			case []any:
				scalars, records = false, false
			default:
				records = false
			}
		}
		if scalars {
			n := &evNode{Kind: "list"}
			for _, e := range x {
				n.Scalars = append(n.Scalars, scalarText(e))
			}
			n.Collapse = len(n.Scalars) > evFoldRows
			return n
		}
		if records {
			// A list of records is a table: one column per key any record has.
			seen := map[string]bool{}
			n := &evNode{Kind: "table"}
			for _, e := range x {
				for k := range e.(map[string]any) {
					if !seen[k] {
						seen[k] = true
						n.Columns = append(n.Columns, k)
					}
				}
			}
			sort.Strings(n.Columns)
			for _, e := range x {
				rec := e.(map[string]any)
				row := make([]*evNode, len(n.Columns))
				for i, c := range n.Columns {
					if cv, ok := rec[c]; ok {
						row[i] = toEvNode(cv, depth+1, c)
					} else {
						row[i] = &evNode{Kind: "empty"}
					}
				}
				n.Rows = append(n.Rows, row)
			}
			n.Collapse = len(n.Rows) > evFoldRows
			return n
		}
		n := &evNode{Kind: "record"} // mixed: index them
		for i, e := range x {
			n.Fields = append(n.Fields, evField{Key: strconv.Itoa(i), Value: toEvNode(e, depth+1, key)})
		}
		return n
	default:
		n := &evNode{Kind: "scalar", Scalar: scalarText(x)}
		if num, ok := x.(json.Number); ok && key != "" {
			if f, err := num.Float64(); err == nil {
				n.Human, _ = human.Evidence(key, f)
			}
		}
		return n
	}
}

func jsonNode(v any) *evNode {
	b, _ := json.Marshal(v)
	return &evNode{Kind: "scalar", Scalar: string(b)}
}

func scalarText(v any) string {
	switch x := v.(type) {
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return string(x)
		}
		if _, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return string(x)
		}
		if f, err := x.Float64(); err == nil {
			return human.Number(f)
		}
		return string(x)
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}
