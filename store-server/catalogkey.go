package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/ledger"
)

// catalogKey is `store-server catalog-key rotate`: it gives a stopped store a new catalog
// key, the step from the old key to it signed by the old one and kept in the data
// directory's chain of rotations (catalog.RotationsFile), and writes the new public key to
// stdout. At its next start the store publishes the chain, retained, before its catalog,
// and signs its catalogs with the new key; a till follows the chain from the key it pinned.
func catalogKey(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(stderr, "usage: store-server catalog-key rotate --store ID --data-dir DIR")
		return errors.New("the one catalog-key command is rotate")
	}
	fs := cli.NewFlags("store-server catalog-key rotate", stderr)
	var store, dataDir string
	fs.String(&store, "store", "POSGATE_STORE", "", "the store id (required): the rotation is signed for it")
	fs.String(&dataDir, "data-dir", "POSGATE_DATA_DIR", "", "the store's data directory (required); the store-server must be stopped")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "store-server catalog-key rotate: give a stopped store a new catalog key, the change signed by the old\n"+
			"one for the tills to follow; the new public key goes to stdout.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if store == "" || dataDir == "" {
		return errors.New("--store and --data-dir are required")
	}
	if !wire.ValidID(store) {
		return fmt.Errorf("--store %q is not a valid id", store)
	}
	// A running store-server holds its key in memory and would go on signing with the old
	// one: the ledger's lock says whether one runs on the directory.
	lock, err := sqlitedb.Lock(filepath.Join(dataDir, ledger.FileName))
	if err != nil {
		if errors.Is(err, sqlitedb.ErrInUse) {
			return fmt.Errorf("stop the store-server first: %w", err)
		}
		return err
	}
	defer lock.Close()
	pub, err := catalog.Rotate(dataDir, store, time.Now())
	if err != nil {
		return err
	}
	pem, err := wire.MarshalStoreKey(pub)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(pem); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "store-server catalog-key rotate: store %s signs its catalogs with key %s from its next start (%s);\n"+
		"tills that pinned an earlier key follow the rotation, kept in %s\n", store, wire.KeyID(pub),
		filepath.Join(dataDir, catalog.PubKeyFile), filepath.Join(dataDir, catalog.RotationsFile))
	return nil
}
