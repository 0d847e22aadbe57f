// Package cli is how posgate's daemons start: flags that fall back to POSGATE_* environment
// variables, and a main that parses, runs until SIGINT or SIGTERM, and exits with 0 (done or
// --help), 1 (failed) or 2 (bad flags).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Program is a daemon built the posgate way: ParseFlags, then Run until ctx ends.
type Program interface {
	ParseFlags(args []string) error
	Run(ctx context.Context) error
}

// Main runs p with the process's arguments and exits.
func Main(name string, p Program) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, name, p)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, name string, p Program) int {
	if err := p.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := p.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// String defines a string flag whose default comes from the environment variable envName
// when it is set.
func String(fs *flag.FlagSet, p *string, name, envName, def, usage string) {
	if v, ok := os.LookupEnv(envName); ok {
		def = v
	}
	fs.StringVar(p, name, def, usage+" (env "+envName+")")
}

// Duration defines a duration flag whose default comes from the environment variable envName
// when it is set and parses.
func Duration(fs *flag.FlagSet, p *time.Duration, name, envName string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(envName); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	fs.DurationVar(p, name, def, usage+" (env "+envName+")")
}

// Bool defines a boolean flag whose default comes from the environment variable envName
// when it is set and parses (1, t, true, 0, f, false, …).
func Bool(fs *flag.FlagSet, p *bool, name, envName string, def bool, usage string) {
	if v, ok := os.LookupEnv(envName); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		}
	}
	fs.BoolVar(p, name, def, usage+" (env "+envName+")")
}

// Logger returns the text logger on stderr that every posgate binary uses, at level
// ("debug", "info", "warn" or "error"; anything else is info).
func Logger(level string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}
