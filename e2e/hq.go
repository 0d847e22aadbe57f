package e2e

import (
	"context"
	"path/filepath"
)

// HQOptions configure an "hq-sync serve" process.
type HQOptions struct {
	Name   string   // for its log file and messages; default "hq"
	DB     string   // --db: a SQLite path or a postgres:// URL
	Stores string   // --stores: the stores and their secrets
	Dir    string   // where its log goes
	Extra  []string // more flags
}

// HQServe is an "hq-sync serve" process.
type HQServe struct {
	*Proc
	Addr string // host:port it listens on
}

// URL returns the address of its batch endpoint.
func (h *HQServe) URL() string { return "http://" + h.Addr + "/v1/batches" }

// StartHQ starts "hq-sync serve" and waits until it listens. A port that another process
// took between FreeAddr and the bind makes it start again on another one (up to five
// times); restarts keep the port.
func StartHQ(ctx context.Context, bin string, o HQOptions) (*HQServe, error) {
	if o.Name == "" {
		o.Name = "hq"
	}
	for attempt := 1; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := append([]string{"serve", "--listen", addr, "--db", o.DB, "--stores", o.Stores, "--log-level", "warn"}, o.Extra...)
		h := &HQServe{Proc: &Proc{Name: "hq-sync serve " + o.Name, Bin: bin, Args: args,
			Log: filepath.Join(o.Dir, o.Name+".log")}, Addr: addr}
		if err = h.Restart(ctx); err == nil || attempt == 5 || !portTaken(err) {
			return h, err
		}
	}
}

// Restart starts the (killed or stopped) process again and waits until it listens.
func (h *HQServe) Restart(ctx context.Context) error {
	if err := h.Start(); err != nil {
		return err
	}
	return h.waitUp(ctx, h.Addr)
}
