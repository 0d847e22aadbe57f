// Package cli is how posgate's daemons start: flags that fall back to POSGATE_* environment
// variables, and a main that parses, runs until SIGINT or SIGTERM, and exits with 0 (done,
// --help or --version), 1 (failed) or 2 (bad flags).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/version"
)

// Program is a daemon built the posgate way: ParseFlags, then Run until ctx ends.
type Program interface {
	ParseFlags(args []string) error
	Run(ctx context.Context) error
}

// Main runs p with the process's arguments and exits. Every file the program creates is
// private to its user (private.Umask).
func Main(name string, p Program) {
	private.Umask()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, name, p)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, name string, p Program) int {
	if WantsVersion(os.Args[1:]) {
		fmt.Println(version.String(name))
		return 0
	}
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

// WantsVersion reports whether the command line asks for the version: -version or
// --version among the flags (before a "--").
func WantsVersion(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}

// Flags is a flag set whose flags may also be given by environment variables: each flag names
// its variable (POSGATE_…), Parse applies the variables that are set and then the arguments,
// which win. A variable whose value does not parse is refused, naming it, as a bad flag is;
// it never falls back to the default unseen. The defaults --help prints are the flags' own:
// a value from the environment is never printed.
type Flags struct {
	*flag.FlagSet
	env     []envFlag
	secrets []*secretFlag
	args    map[string]bool // the flags the arguments gave, once parsed
}

type envFlag struct{ flag, env string }

// NewFlags returns an empty flag set named name whose errors and help go to out.
func NewFlags(name string, out io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &Flags{FlagSet: fs}
}

// String defines a string flag that the environment variable envName may also set.
func (f *Flags) String(p *string, name, envName, def, usage string) {
	f.StringVar(p, name, def, f.from(name, envName, usage))
}

// Duration defines a duration flag that the environment variable envName may also set.
func (f *Flags) Duration(p *time.Duration, name, envName string, def time.Duration, usage string) {
	f.DurationVar(p, name, def, f.from(name, envName, usage))
}

// Bool defines a boolean flag that the environment variable envName may also set (1, t,
// true, 0, f, false, …).
func (f *Flags) Bool(p *bool, name, envName string, def bool, usage string) {
	f.BoolVar(p, name, def, f.from(name, envName, usage))
}

// Int defines an int flag that the environment variable envName may also set.
func (f *Flags) Int(p *int, name, envName string, def int, usage string) {
	f.IntVar(p, name, def, f.from(name, envName, usage))
}

// List defines a flag that may be given more than once, each time one value or a comma
// list; the environment variable envName may also set it, as a comma list. Blanks around
// each value are dropped, and empty values with them.
func (f *Flags) List(p *[]string, name, envName, usage string) {
	f.Var((*listValue)(p), name, f.from(name, envName, usage))
}

// listValue is a List flag's value.
type listValue []string

func (l *listValue) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *listValue) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func (f *Flags) from(name, envName, usage string) string {
	f.env = append(f.env, envFlag{name, envName})
	return usage + " (env " + envName + ")"
}

// Parse parses args, then applies the environment variables of the flags the arguments did
// not give, in the order the flags were defined. A variable's value that its flag refuses is
// an error naming the variable.
func (f *Flags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	f.args = map[string]bool{}
	f.Visit(func(fl *flag.Flag) { f.args[fl.Name] = true })
	for _, e := range f.env {
		v, ok := os.LookupEnv(e.env)
		if !ok || f.args[e.flag] {
			continue
		}
		if err := f.Set(e.flag, v); err != nil {
			return fmt.Errorf("environment variable %s=%q: %w", e.env, v, err)
		}
	}
	for _, s := range f.secrets {
		if err := s.load(); err != nil {
			return err
		}
	}
	return nil
}

// Given reports whether the arguments gave flag name (its environment variable does not
// count).
func (f *Flags) Given(name string) bool { return f.args[name] }

// Env returns the environment variable of flag name, or "" when it has none.
func (f *Flags) Env(name string) string {
	for _, e := range f.env {
		if e.flag == name {
			return e.env
		}
	}
	return ""
}

// Logger returns the text logger on stderr that every posgate binary uses, at level
// ("debug", "info", "warn" or "error"; anything else is info).
func Logger(level string) *slog.Logger { return LoggerTo(os.Stderr, level) }

// LoggerTo is Logger writing to w (a log file, say).
func LoggerTo(w io.Writer, level string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}
