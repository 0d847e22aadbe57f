//go:build unix

package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// PostgresDB is the database Start creates in the postgres server for the tests.
const PostgresDB = "posgate"

// postgresGlob is where Debian's postgresql packages put their binaries, one directory per
// major version. Tests replace it to pretend postgres is not installed.
var postgresGlob = "/usr/lib/postgresql/*/bin"

// PostgresURL returns the URL of the database PostgresDB, for pgx:
// "postgres://postgres@127.0.0.1:PORT/posgate?sslmode=disable", or "" without Postgres.
func (s *Stack) PostgresURL() string {
	if s.Postgres == nil {
		return ""
	}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: s.Postgres.Addr(), Path: "/" + PostgresDB,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// pgDataDir is the data directory (initdb's) of a postgres Proc whose Dir is dir.
func pgDataDir(dir string) string { return filepath.Join(dir, "data") }

// lookPostgres finds postgres and initdb in one directory, so that both are of the same
// major version: first through PATH (following symlinks such as /usr/local/bin/initdb),
// then in the newest of /usr/lib/postgresql/*/bin.
func lookPostgres() (postgres, initdb string, err error) {
	pair := func(dir string) (string, string, bool) {
		p, i := filepath.Join(dir, "postgres"), filepath.Join(dir, "initdb")
		return p, i, isExecutable(p) && isExecutable(i)
	}
	for _, name := range []string{"postgres", "initdb"} {
		if path, err := exec.LookPath(name); err == nil {
			if real, err := filepath.EvalSymlinks(path); err == nil {
				if p, i, ok := pair(filepath.Dir(real)); ok {
					return p, i, nil
				}
			}
		}
	}
	dirs, _ := filepath.Glob(postgresGlob)
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(b) - pgMajor(a) }) // newest first
	for _, d := range dirs {
		if p, i, ok := pair(d); ok {
			return p, i, nil
		}
	}
	return "", "", fmt.Errorf("stack: postgres and initdb not found in PATH or %s: `make test` installs them (apt-get install -y postgresql)", postgresGlob)
}

// pgMajor returns the major version in a path like /usr/lib/postgresql/15/bin, or 0.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// postgresCredential returns the credential postgres runs with: the postgres OS user when
// the launcher runs as root (postgres refuses to run as root), nil otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("stack: running as root, postgres needs the postgres OS user (apt-get install -y postgresql creates it): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("stack: postgres OS user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startPostgres creates the cluster in Dir/pg (initdb, as the postgres OS user when root),
// starts postgres on a free port and creates the database PostgresDB.
func (s *Stack) startPostgres(ctx context.Context, bins binaries, settings []string) (*Proc, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, "pg")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
		if err := searchableBy(dir); err != nil {
			return nil, err
		}
	}
	if err := s.initdb(ctx, bins.initdb, dir, cred); err != nil {
		return nil, err
	}
	if err := appendSettings(dir, settings); err != nil {
		return nil, err
	}
	p, err := s.first(ctx, kindPostgres, "pg", bins.postgres, nil, cred)
	if err != nil {
		return nil, err
	}
	if err := pgExec(ctx, p.Addr(), "postgres", "CREATE DATABASE "+PostgresDB); err != nil {
		return nil, fmt.Errorf("stack: create database %s: %w", PostgresDB, err)
	}
	return p, nil
}

// initdb creates the cluster's data directory with trust authentication for local
// connections (the server listens on 127.0.0.1 only), superuser postgres, UTF8 and the C
// locale.
func (s *Stack) initdb(ctx context.Context, bin, dir string, cred *syscall.Credential) error {
	cmd := exec.CommandContext(ctx, bin, "-D", pgDataDir(dir), "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 12 {
			lines = lines[len(lines)-12:]
		}
		return fmt.Errorf("stack: initdb %s: %w\n%s", pgDataDir(dir), err, strings.Join(lines, "\n"))
	}
	s.logf("stack: initdb %s", pgDataDir(dir))
	return nil
}

// searchableBy makes dir reachable for the postgres OS user: every ancestor inside the
// temporary directory that others cannot search (t.TempDir and os.MkdirTemp make them
// 0700) gets the search bit, and nothing more (no read, no write). An ancestor outside the
// temporary directory is never changed; if one blocks the way, the error says so.
func searchableBy(dir string) error {
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tmp = os.TempDir()
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("stack: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			inTmp := d != tmp && strings.HasPrefix(d, tmp+string(filepath.Separator))
			if !inTmp {
				return fmt.Errorf("stack: the postgres OS user cannot reach %s: %s has mode %v; use a Dir under %s", dir, d, fi.Mode().Perm(), tmp)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("stack: %w", err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// appendSettings appends lines to the postgresql.conf of the cluster in dir.
func appendSettings(dir string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(pgDataDir(dir), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	_, err = f.WriteString("\n# stack.Options.PostgresSettings\n" + strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stack: postgresql.conf: %w", err)
	}
	return nil
}
