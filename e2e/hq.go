package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/posgate/posgate/hq-sync/hqview"
	"github.com/posgate/posgate/hq-sync/serve"
)

// ServeOptions configure an hq-sync serve process (HQ's receiver).
type ServeOptions struct {
	Name        string            // for its log file and messages; default "serve"
	DB          string            // a SQLite path or a postgres:// URL
	Stores      map[string]string // store → secret, written to Dir/stores.json
	StoresFile  string            // or a stores file already written
	Dir         string            // its stores file and log
	ViewerToken string            // the HQ page's token ("": no page)
	LogLevel    string
	Extra       []string // more flags
}

// Serve is an hq-sync serve process.
type Serve struct {
	*Proc
	Opts       ServeOptions
	Addr       string // host:port of its HTTP listener (batches and the HQ page)
	MetricsURL string // its GET /metrics
	StoresFile string

	metricsAddr string
}

// BatchesURL is the URL uploaders send their batches to.
func (s *Serve) BatchesURL() string { return "http://" + s.Addr + serve.BatchesPath }

// PageURL is the HQ page's address with its viewer token in the fragment (which never
// reaches the server; the page takes it out of the address bar).
func (s *Serve) PageURL() string { return "http://" + s.Addr + "/#token=" + s.Opts.ViewerToken }

// StartServe writes the stores file and starts hq-sync serve, and waits until it and its
// metrics listen; like StartStore, it starts again on other ports if one was taken.
func StartServe(ctx context.Context, bin string, o ServeOptions) (*Serve, error) {
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.Name == "" {
		o.Name = "serve"
	}
	stores := o.StoresFile
	if stores == "" {
		type secret struct {
			Store  string `json:"store"`
			Secret string `json:"secret"`
		}
		list := []secret{}
		for st, sec := range o.Stores {
			list = append(list, secret{st, sec})
		}
		b, err := json.Marshal(list)
		if err != nil {
			return nil, err
		}
		stores = filepath.Join(o.Dir, o.Name+"-stores.json")
		if err := os.WriteFile(stores, b, 0o600); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		maddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"serve", "--listen", addr, "--metrics-listen", maddr, "--db", o.DB, "--stores", stores,
			"--log-level", o.LogLevel}
		args = append(args, o.Extra...)
		var env []string
		if o.ViewerToken != "" {
			env = append(env, "POSGATE_HQ_VIEWER_TOKEN="+o.ViewerToken)
		}
		s := &Serve{Proc: &Proc{Name: "hq-sync " + o.Name, Bin: bin, Args: args, Env: env, Log: filepath.Join(o.Dir, o.Name+".log")},
			Opts: o, Addr: addr, MetricsURL: "http://" + maddr + "/metrics", StoresFile: stores, metricsAddr: maddr}
		if err = s.Restart(ctx); err == nil || attempt == 5 || !portTaken(err) {
			return s, err
		}
	}
}

// Restart starts serve again and waits until it listens.
func (s *Serve) Restart(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.waitUp(ctx, s.Addr, s.metricsAddr)
}

// UploaderOptions configure an hq-sync upload process at a store.
type UploaderOptions struct {
	Store    string
	DataDir  string // the store-server's: its ledger.db, and upload.db where the store-server looks for the state
	HQURL    string // serve's batches URL
	Secret   string
	TZ       string
	LogLevel string
}

// Uploader is an hq-sync upload process.
type Uploader struct {
	*Proc
	Opts       UploaderOptions
	MetricsURL string

	metricsAddr string
}

// StartUploader starts hq-sync upload on the store's ledger and waits until its metrics
// listen.
func StartUploader(ctx context.Context, bin string, o UploaderOptions) (*Uploader, error) {
	if o.TZ == "" {
		o.TZ = "Asia/Shanghai"
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	for attempt := 1; ; attempt++ {
		maddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"upload", "--store", o.Store, "--ledger", filepath.Join(o.DataDir, "ledger.db"),
			"--state", filepath.Join(o.DataDir, "upload.db"), "--hq-url", o.HQURL, "--tz", o.TZ,
			"--metrics-listen", maddr, "--log-level", o.LogLevel}
		u := &Uploader{Proc: &Proc{Name: "hq-sync upload " + o.Store, Bin: bin, Args: args,
			Env: []string{"POSGATE_HQ_SECRET=" + o.Secret}, Log: filepath.Join(o.DataDir, "upload.log")},
			Opts: o, MetricsURL: "http://" + maddr + "/metrics", metricsAddr: maddr}
		err = u.Restart(ctx)
		if err == nil || attempt == 5 || !portTaken(err) {
			if err != nil {
				return u, fmt.Errorf("hq-sync upload: %w", err)
			}
			return u, nil
		}
	}
}

// Restart starts the (stopped or killed) uploader again and waits until its metrics listen.
func (u *Uploader) Restart(ctx context.Context) error {
	if err := u.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return u.waitUp(ctx, u.metricsAddr)
}

// ViewClient returns a client of serve's HQ page API, with its viewer token.
func (s *Serve) ViewClient() *hqview.Client {
	return &hqview.Client{BaseURL: "http://" + s.Addr, Token: s.Opts.ViewerToken}
}

// LedgerTxns returns how many sales and refunds the store's ledger holds of date.
func LedgerTxns(ctx context.Context, s *StoreServer, date string) (int, error) {
	tot, err := s.Manager().Totals(ctx, date)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tot.Terminals {
		n += int(t.Ledger.Sales + t.Ledger.Refunds)
	}
	return n, nil
}

// WaitDeclared waits until the store's uploader has nothing left to send and HQ (serve,
// started with a viewer token) holds the store's declaration of date listing every sale and
// refund the store's ledger holds of it; it returns that count.
func WaitDeclared(ctx context.Context, s *StoreServer, hq *Serve, date string) (int, error) {
	view := hq.ViewClient()
	var last string
	for {
		txns, err := LedgerTxns(ctx, s, date)
		if err != nil {
			return 0, err
		}
		a, err := s.Manager().HQ(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case a.Upload == nil:
			last = "no uploader state yet"
		case a.Upload.Backlog > 0 || a.Upload.Pending != "" || a.Upload.ExceptionsWaiting > 0:
			last = fmt.Sprintf("upload: %d rows, pending %q, %d exception changes waiting", a.Upload.Backlog,
				a.Upload.Pending, a.Upload.ExceptionsWaiting)
		default:
			o, err := view.Overview(ctx, date)
			if err != nil {
				last = err.Error()
				break
			}
			last = "HQ holds no declaration of the day"
			for _, st := range o.Stores {
				for _, day := range st.Days {
					if st.Store == s.Opts.Store && day.Date == date {
						last = fmt.Sprintf("HQ holds revision %d of %d transactions, the ledger %d", day.Revision, day.Txns, txns)
						if day.Txns == txns {
							return txns, nil
						}
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%s)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
