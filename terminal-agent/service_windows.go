package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/debug"
	"golang.org/x/sys/windows/svc/mgr"
)

// serviceName is the agent's name in the service control manager (sc query, net start).
const serviceName = "posgate-terminal-agent"

const serviceUsage = `terminal-agent service: run the agent as a Windows service.

  terminal-agent service install [agent flags]   register it (automatic start, restarted if it fails)
  terminal-agent service start                   start it and wait until it serves the POS app
  terminal-agent service stop                    stop it: the API stops, the outbox closes (as SIGTERM)
  terminal-agent service uninstall               stop it if running and remove it
  terminal-agent service run [agent flags]       what the service control manager runs; from a
                                                 console, the same service until Ctrl-C

The flags given to install are the agent's own (terminal-agent --help); install checks them
and the service runs with them. Data: --data-dir (default %ProgramData%\posgate); log:
--log-file (default logs\terminal-agent.log in the data directory), rotated at 10 MB.
`

// serviceMain runs terminal-agent service COMMAND and returns the exit status: 0 done,
// 1 failed, 2 bad command line.
func serviceMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, serviceUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "install":
		err = installService(args[1:])
	case "uninstall":
		err = uninstallService()
	case "start":
		err = startService()
	case "stop":
		err = stopService()
	case "run":
		err = runService(args[1:])
	case "-h", "--help", "help":
		fmt.Print(serviceUsage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "terminal-agent service: unknown command %q\n\n%s", args[0], serviceUsage)
		return 2
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "terminal-agent service:", err)
		return 2
	default:
		fmt.Fprintln(os.Stderr, "terminal-agent service:", err)
		return 1
	}
}

// usageError is a refused command line: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// serviceMainFor parses the agent's flags as the service will run them, with the service's
// default log file.
func serviceMainFor(args []string) (*Main, error) {
	m := NewMain()
	if err := m.ParseFlags(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if m.LogFile == "" {
		m.LogFile = filepath.Join(m.DataDir, "logs", "terminal-agent.log")
	}
	return m, nil
}

// installService registers the service to run this executable with args, after checking
// them: a service that could not start is refused at install, not found failing later.
func installService(args []string) error {
	if _, err := serviceMainFor(args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return err
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("service control manager: %w", err)
	}
	defer m.Disconnect()
	if s, err := m.OpenService(serviceName); err == nil {
		s.Close()
		return fmt.Errorf("%s is already installed: uninstall it first", serviceName)
	}
	s, err := m.CreateService(serviceName, exe, mgr.Config{
		StartType:   mgr.StartAutomatic,
		DisplayName: "posgate terminal agent",
		Description: "posgate: the till's offline-first gateway to its store (local API for the POS app, outbox, sync).",
	}, append([]string{"service", "run"}, args...)...)
	if err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	defer s.Close()
	restart := mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: 5 * time.Second}
	if err := s.SetRecoveryActions([]mgr.RecoveryAction{restart, restart, restart}, 24*3600); err != nil {
		fmt.Fprintf(os.Stderr, "terminal-agent service: installed, but not restarted on failure: %v\n", err)
	}
	fmt.Printf("installed %s: %s service run ...\n", serviceName, exe)
	return nil
}

// openService opens the installed service.
func openService() (*mgr.Mgr, *mgr.Service, error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, nil, fmt.Errorf("service control manager: %w", err)
	}
	s, err := m.OpenService(serviceName)
	if err != nil {
		m.Disconnect()
		return nil, nil, fmt.Errorf("%s: %w", serviceName, err)
	}
	return m, s, nil
}

// startService starts the service (if it is not running yet) and waits until it serves
// (Running) or has stopped.
func startService() error {
	m, s, err := openService()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	defer s.Close()
	// Started already (an automatic service starts with the machine): wait for it all the same.
	if err := s.Start(); err != nil && !errors.Is(err, windows.ERROR_SERVICE_ALREADY_RUNNING) {
		return fmt.Errorf("start %s: %w", serviceName, err)
	}
	st, err := waitState(s, svc.Running, 60*time.Second)
	if err != nil {
		return err
	}
	if st.State != svc.Running {
		return fmt.Errorf("%s stopped while starting (exit code %d, service code %d): see its log",
			serviceName, st.Win32ExitCode, st.ServiceSpecificExitCode)
	}
	fmt.Printf("%s running (pid %d)\n", serviceName, st.ProcessId)
	return nil
}

// stopService asks the service to stop and waits until it has closed its outbox.
func stopService() error {
	m, s, err := openService()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	defer s.Close()
	return stopAndWait(s)
}

func stopAndWait(s *mgr.Service) error {
	st, err := s.Query()
	if err != nil {
		return err
	}
	if st.State == svc.Stopped {
		return nil
	}
	if _, err := s.Control(svc.Stop); err != nil && !errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) {
		return fmt.Errorf("stop %s: %w", serviceName, err)
	}
	if _, err := waitState(s, svc.Stopped, 60*time.Second); err != nil {
		return err
	}
	fmt.Printf("%s stopped\n", serviceName)
	return nil
}

// uninstallService stops the service if it runs and removes it; its data and logs stay.
func uninstallService() error {
	m, s, err := openService()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	defer s.Close()
	if err := stopAndWait(s); err != nil {
		return err
	}
	if err := s.Delete(); err != nil {
		return fmt.Errorf("delete %s: %w", serviceName, err)
	}
	fmt.Printf("removed %s (its data directory and logs stay)\n", serviceName)
	return nil
}

// waitState polls the service until it reaches want or Stopped, or d passes.
func waitState(s *mgr.Service, want svc.State, d time.Duration) (svc.Status, error) {
	deadline := time.Now().Add(d)
	for {
		st, err := s.Query()
		if err != nil {
			return st, err
		}
		if st.State == want || st.State == svc.Stopped {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s: still in state %d after %s", serviceName, st.State, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runService runs the agent as the service control manager's service, or, from a console,
// through the same handler until Ctrl-C. It asks the manager first: svc.IsWindowsService
// reads the parent's session, which Wine does not number as Windows does.
func runService(args []string) error {
	m, err := serviceMainFor(args)
	if err != nil {
		return err
	}
	h := &agentService{m: m}
	err = svc.Run(serviceName, h)
	if errors.Is(err, windows.ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
		err = debug.Run(serviceName, h) // not started by the manager: a console
	}
	if err == nil {
		err = h.err
	}
	return err
}

// agentService is the agent under the service control manager: running once its API
// listens; Stop and Shutdown end it as SIGTERM does (the API stops, the outbox closes).
type agentService struct {
	m   *Main
	err error // what Run returned
}

// Execute is svc.Handler's.
func (h *agentService) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending, WaitHint: 30000}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	running := svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case <-h.m.Addr:
			status <- running
		case err := <-done: // it stopped by itself: it failed, and the manager restarts it
			h.err = err
			if err != nil {
				return true, 1
			}
			return false, 0
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending, WaitHint: 30000}
				cancel()
				if h.err = <-done; h.err != nil {
					return true, 1
				}
				return false, 0
			}
		}
	}
}
