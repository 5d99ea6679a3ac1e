package lpm_test

import (
	"fmt"
	"net/netip"

	"github.com/wolf-investigator/wolf/lpm"
)

func Example() {
	var routes lpm.Table[string]
	routes.BulkLoad([]lpm.Entry[string]{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Value: "default"},
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Value: "corp"},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Value: "doc"},
	})
	routes.Insert(netip.MustParsePrefix("10.1.0.0/16"), "lab")

	for _, s := range []string{"10.1.2.3", "10.2.0.1", "192.0.2.1", "2001:db8::1", "::ffff:10.1.2.3"} {
		v, pfx, ok := routes.Lookup(netip.MustParseAddr(s))
		fmt.Println(s, v, pfx, ok)
	}

	routes.Delete(netip.MustParsePrefix("10.1.0.0/16"))
	for pfx, v := range routes.All() {
		fmt.Println(pfx, v)
	}
	// Output:
	// 10.1.2.3 lab 10.1.0.0/16 true
	// 10.2.0.1 corp 10.0.0.0/8 true
	// 192.0.2.1 default 0.0.0.0/0 true
	// 2001:db8::1 doc 2001:db8::/32 true
	// ::ffff:10.1.2.3  invalid Prefix false
	// 0.0.0.0/0 default
	// 10.0.0.0/8 corp
	// 2001:db8::/32 doc
}
