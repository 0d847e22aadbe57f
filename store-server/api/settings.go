package api

import (
	"errors"
	"net/http"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/settings"
)

// settingsAnswer is what the manager sees of the store's settings: supervisors by name.
func settingsAnswer(cur wire.Settings, published bool) client.SettingsAnswer {
	a := client.SettingsAnswer{Version: cur.Version, Supervisors: make([]string, 0, len(cur.Supervisors)),
		RefundRules: client.RefundRules{SupervisorAbove: cur.RefundSupervisorAbove, Offline: cur.OfflineRefunds},
		Published:   published || cur.Version == 0}
	for _, sv := range cur.Supervisors {
		a.Supervisors = append(a.Supervisors, sv.Name)
	}
	return a
}

// changed answers a change of the settings: saved and published, or saved and waiting for
// the broker (answered as done: the change is made, and goes out once the broker takes it).
func (s *Server) changed(cur wire.Settings, err error) (any, error) {
	var np *settings.NotPublishedError
	switch {
	case errors.As(err, &np):
		s.Logger.Warn("settings saved, not yet published", "version", cur.Version, "err", np.Err)
		return settingsAnswer(cur, false), nil
	case err != nil:
		return nil, err
	}
	s.Logger.Info("settings changed", "version", cur.Version, "supervisors", len(cur.Supervisors))
	return settingsAnswer(cur, true), nil
}

func (s *Server) noSettings() error {
	return perr.New(perr.Unavailable, "settings_unavailable", "this store-server keeps no settings")
}

func (s *Server) getSettings(r *http.Request) (any, error) {
	if s.Settings == nil {
		return nil, s.noSettings()
	}
	return settingsAnswer(s.Settings.Current(), true), nil
}

func (s *Server) setSupervisor(r *http.Request) (any, error) {
	if s.Settings == nil {
		return nil, s.noSettings()
	}
	var req client.SupervisorRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	return s.changed(s.Settings.SetSupervisor(r.PathValue("name"), req.PIN, s.Pub))
}

func (s *Server) removeSupervisor(r *http.Request) (any, error) {
	if s.Settings == nil {
		return nil, s.noSettings()
	}
	return s.changed(s.Settings.RemoveSupervisor(r.PathValue("name"), s.Pub))
}

func (s *Server) setRefundRules(r *http.Request) (any, error) {
	if s.Settings == nil {
		return nil, s.noSettings()
	}
	var req client.RefundRules
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	return s.changed(s.Settings.SetRefunds(req.SupervisorAbove, req.Offline, s.Pub))
}
