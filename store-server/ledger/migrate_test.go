package ledger

import (
	"context"
	"testing"

	"github.com/posgate/posgate/internal/sqlitedb"
)

// openBefore opens a ledger at path with the store's migrations before the one numbered
// first (its name prefix), as a ledger of an earlier release holds it.
func openBefore(t *testing.T, path, first string) *sqlitedb.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, migrationsBefore(t, first))
	if err != nil {
		t.Fatal(err)
	}
	return db
}
