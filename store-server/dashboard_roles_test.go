package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDashboardByRole: the dashboard shows each token only what its role may do (GET
// /v1/whoami): the viewer sees the stock without its count buttons and no backup button,
// the operator the count buttons, the backup token no board but its backup button.
func TestDashboardByRole(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"name":"wall","role":"viewer","token":"dashboard-viewer-token"},
		{"name":"duty","role":"operator","token":"dashboard-operator-token"},
		{"name":"nightly","role":"backup","token":"dashboard-backup-token1"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := biRunServer(t, "--api-tokens", tokens)
	srv.openStore(t)
	visible := `(sel) => Array.from(document.querySelectorAll(sel)).filter((e) => e.offsetParent !== null).length`
	for _, c := range []struct {
		token                 string
		board, counts, backup bool
	}{
		{"dashboard-viewer-token", true, false, false},
		{"dashboard-operator-token", true, true, false},
		{"dashboard-backup-token1", false, false, true},
		{biToken, true, true, true},
	} {
		t.Run(c.token, func(t *testing.T) {
			b := startBrowser(t)
			b.open(srv.Base + "/#token=" + c.token)
			if c.board {
				b.waitText("#stock tbody", "A1")
			}
			b.until("whoami applied", func() bool {
				var may string
				return b.Eval(`document.body.dataset.may || ""`, &may) == nil && may != ""
			})
			var counts, backup, board int
			for sel, n := range map[string]*int{"#stock tbody button": &counts, "#backup": &backup, "#board": &board} {
				if err := b.Eval("("+visible+")("+quoteJS(sel)+")", n); err != nil {
					t.Fatal(err)
				}
			}
			if (board > 0) != c.board || (counts > 0) != c.counts || (backup > 0) != c.backup {
				t.Errorf("board %d, count buttons %d, backup button %d; want %v %v %v", board, counts, backup, c.board, c.counts, c.backup)
			}
		})
	}
}

func quoteJS(s string) string { return "'" + s + "'" }
