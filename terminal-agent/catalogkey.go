package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/private"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// catalogKeyCommand runs catalogKeyMain for main and returns the exit code.
func catalogKeyCommand(args []string) int {
	private.Umask()
	if err := catalogKeyMain(args, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "terminal-agent catalog-key:", err)
		return 2
	}
	return 0
}

// catalogKeyMain is `terminal-agent catalog-key reset`: it pins, in the outbox of a stopped
// agent, the store's catalog key given in place of the one the till holds. A till follows
// by itself the rotations the store signs with the key it holds; the reset is for a key that
// was lost with the store's data directory, or stolen (a stolen key can sign a rotation of
// its own to the thief's key: every till is then reset by someone at it).
func catalogKeyMain(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "reset" {
		fmt.Fprintln(stderr, "usage: terminal-agent catalog-key reset --data-dir DIR --store-key FILE|BASE64")
		return errors.New("the one catalog-key command is reset")
	}
	flags := cli.NewFlags("terminal-agent catalog-key reset", stderr)
	var dataDir, keyArg string
	flags.String(&dataDir, "data-dir", "POSGATE_DATA_DIR", defaultDataDir(), "the agent's data directory (its outbox); the agent must be stopped")
	flags.String(&keyArg, "store-key", "POSGATE_STORE_KEY", "",
		"the store's public catalog key: its file (the store's catalog-key.pub) or the key in base64 (required)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "terminal-agent catalog-key reset: pin the store's catalog key given in place of the one the till holds\n"+
			"(the store's key lost or stolen); only catalogs signed by it are taken from now on.")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	if keyArg == "" {
		return errors.New("--store-key is required")
	}
	key, err := readStoreKey(keyArg)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, "outbox.db")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no outbox in %s (the agent pins --store-key at its first start): %w", dataDir, err)
	}
	ctx := context.Background()
	st, err := outbox.Open(ctx, path, outbox.Config{}) // fails while the agent runs: it holds the outbox
	if err != nil {
		return err
	}
	defer st.Close()
	was, err := st.ResetStoreKey(ctx, key)
	if err != nil {
		return err
	}
	wasID := "none"
	if was != nil {
		wasID = wire.KeyID(was)
	}
	fmt.Fprintf(stdout, "terminal-agent catalog-key reset: store catalog key %s pinned (was %s) in %s\n", wire.KeyID(key), wasID, path)
	return nil
}

// readStoreKey reads a store's public catalog key from a file (wire.MarshalStoreKey's PEM)
// or from base64 text of the key's 32 bytes.
func readStoreKey(arg string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(arg)
	if err == nil {
		k, err := wire.ParseStoreKey(b)
		if err != nil {
			return nil, fmt.Errorf("--store-key %s: %w", arg, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--store-key: %w", err)
	}
	k, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(arg))
	if derr != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("--store-key %q is neither a file nor an ed25519 public key in base64", arg)
	}
	return ed25519.PublicKey(k), nil
}
