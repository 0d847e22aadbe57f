package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxSecretFile is the most a secret's file may hold.
const MaxSecretFile = 4096

// secretFlag is a secret: its value comes from env or from the file flag file names.
type secretFlag struct {
	p        *string
	name     string // the secret's name, e.g. api-token (its flag is name-file)
	env      string
	min      int
	filePath string
}

// Secret defines a secret that never travels as an argument (where ps shows it): its value
// comes from the environment variable envName or from the file --name-file names (or
// envName_FILE), never both. A file's trailing line ending is dropped; an empty file is
// refused. A value shorter than min bytes is refused at Parse, naming the secret's source
// and never its value. The secret has no default and --help prints nothing of it.
func (f *Flags) Secret(p *string, name, envName string, min int, usage string) {
	s := &secretFlag{p: p, name: name, env: envName, min: min}
	f.secrets = append(f.secrets, s)
	f.String(&s.filePath, name+"-file", envName+"_FILE", "",
		"file holding "+usage+"; or its value in "+envName+" (never as an argument)")
}

// SecretSource says where secret name came from once parsed: "" when it was not given.
func (f *Flags) SecretSource(name string) string {
	for _, s := range f.secrets {
		if s.name == name {
			return s.source()
		}
	}
	return ""
}

func (s *secretFlag) source() string {
	if s.filePath != "" {
		return "--" + s.name + "-file " + s.filePath
	}
	if _, ok := os.LookupEnv(s.env); ok {
		return s.env
	}
	return ""
}

// load reads the secret from its file or its variable and checks its length.
func (s *secretFlag) load() error {
	v, inEnv := os.LookupEnv(s.env)
	switch {
	case s.filePath != "" && inEnv:
		return fmt.Errorf("%s: give --%s-file or %s, not both", s.name, s.name, s.env)
	case s.filePath != "":
		b, err := readSecretFile(s.filePath)
		if err != nil {
			return fmt.Errorf("--%s-file: %w", s.name, err)
		}
		v = b
	case !inEnv:
		*s.p = ""
		return nil
	}
	if v == "" {
		return fmt.Errorf("%s: empty", s.source())
	}
	if len(v) < s.min {
		return fmt.Errorf("%s: %d bytes, want at least %d", s.source(), len(v), s.min)
	}
	*s.p = v
	return nil
}

// readSecretFile reads a secret's file: at most MaxSecretFile bytes, one trailing line
// ending dropped.
func readSecretFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxSecretFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > MaxSecretFile {
		return "", fmt.Errorf("%s: more than %d bytes", path, MaxSecretFile)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}
