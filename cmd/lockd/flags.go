package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseFlags parses args into fs as the flag package does, but says what a
// command line got wrong in one line: a duration without a unit ("--ttl
// takes a duration like 30s, 2m or 1h30m; "5" has no unit: 5s?") rather than
// "parse error", and a pointer to -h rather than every flag of the command.
// -h still lists them all.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := checkDurations(fs, args); err != nil {
		return err
	}
	full := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = full
	switch {
	case errors.Is(err, flag.ErrHelp):
		full()
		return &exitError{code: exitOK}
	case err != nil:
		// The flag package has printed what was wrong.
		return usageError("run '%s -h' for its flags", fs.Name())
	}
	return nil
}

// checkDurations finds the values given to fs's duration flags in args and
// refuses one that does not parse, in words a person can act on.
func checkDurations(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil // what follows is a COMMAND's, with flags of its own
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a positional argument
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil // the flag package says it wants a value
			}
			i++
			value = args[i]
		}
		if _, isDur := f.Value.(flag.Getter).Get().(time.Duration); !isDur {
			continue
		}
		if _, err := time.ParseDuration(value); err != nil {
			return usageError("--%s takes a duration like 30s, 2m or 1h30m; %s", name, whyNotDuration(value))
		}
	}
	return nil
}

// whyNotDuration says what is wrong with s as a duration.
func whyNotDuration(s string) string {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return fmt.Sprintf("%q has no unit (%ss?)", s, s)
	}
	return fmt.Sprintf("%q is not one", s)
}
