// Command zap-info-go is zap-info in Go, over package transport: the
// plugin directories searched, one row per candidate transport, and what
// a pick would choose now, and why.
//
//	zap-info-go [-v] [PREFERENCE]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/libzap/libzap/bindings/go/transport"
)

func main() {
	verbose := flag.Bool("v", false, "print each plugin's probe detail")
	flag.Parse()
	r, err := transport.LoadReport()
	if err != nil {
		fmt.Fprintln(os.Stderr, "zap-info-go:", err)
		os.Exit(1)
	}
	fmt.Printf("libzap %s\n\nplugin directories:\n", transport.Version())
	for _, d := range r.Dirs {
		fmt.Printf("  %-40s %-16s %s\n", d.Path, d.Source, d.Status)
	}
	fmt.Printf("\n%-10s %-13s %5s %-8s %s\n", "transport", "state", "rank", "version", "reason")
	for _, p := range r.Plugins {
		fmt.Printf("%-10s %-13s %5d %-8s %s\n", p.Name, p.State, p.Rank, p.Version, p.Reason)
		if *verbose {
			fmt.Printf("           path %s; caps %+v\n", p.Path, p.Caps)
			for _, l := range strings.Split(strings.TrimSpace(p.Detail), "\n") {
				if l != "" {
					fmt.Printf("           %s\n", l)
				}
			}
		}
	}
	ch, err := transport.Explain(flag.Arg(0))
	if err != nil {
		fmt.Printf("\npick: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("\npick: %s (%s)\n", ch.Name, ch.Reason)
}
