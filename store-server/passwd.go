package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/store-server/broker"
)

// passwd is `store-server passwd`: it adds a terminal's MQTT account to the users file of
// the embedded broker (--mqtt-users), or replaces its password, reading the password from
// the first line of stdin and keeping only its bcrypt hash.
func passwd(args []string, stdin io.Reader, stderr io.Writer) error {
	fs := cli.NewFlags("store-server passwd", stderr)
	var users, username, terminal string
	fs.String(&users, "users", "POSGATE_MQTT_USERS", "", "the users file (--mqtt-users) to add the account to; made if missing")
	fs.String(&username, "username", "POSGATE_MQTT_USERNAME", "", "the account's user name (required)")
	fs.String(&terminal, "terminal", "POSGATE_TERMINAL", "", "the terminal id the account is for (required)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "store-server passwd: add or change a terminal's MQTT account; the password is the first line of stdin\n"+
			"(%d to %d bytes), and the file keeps only its bcrypt hash.\n\n", broker.MinPasswordBytes, broker.MaxPasswordBytes)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if users == "" || username == "" || terminal == "" {
		return errors.New("--users, --username and --terminal are required")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the password from stdin: %w", err)
	}
	u, err := broker.NewUser(username, strings.TrimRight(line, "\r\n"), terminal, broker.HashCost)
	if err != nil {
		return err
	}
	if err := broker.SaveUser(users, u); err != nil {
		return fmt.Errorf("%s: %w", users, err)
	}
	fmt.Fprintf(stderr, "store-server passwd: %s (terminal %s) written to %s\n", username, terminal, users)
	return nil
}
