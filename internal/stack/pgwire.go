//go:build unix

package stack

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// The launcher speaks just enough of the PostgreSQL frontend/backend protocol (v3) to probe
// postgres and create a database: a startup as user postgres with trust authentication and
// simple queries, one connection per call. As with RESP, keeping this out of pgx keeps the
// launcher's checks independent of the client library under test.

// pgError is an ErrorResponse from postgres.
type pgError struct{ severity, code, message string }

func (e *pgError) Error() string {
	return fmt.Sprintf("postgres: %s %s: %s", e.severity, e.code, e.message)
}

// pgExec connects to addr as user postgres, database db, and runs query with the simple
// query protocol ("" only completes the startup). Each call is bounded by ctx and by 5 s.
func pgExec(ctx context.Context, addr, db, query string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)

	// StartupMessage: length, protocol 3.0, then name/value pairs ended by an empty name.
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 3<<16)
	for _, s := range []string{"user", "postgres", "database", db, ""} {
		body = append(append(body, s...), 0)
	}
	if _, err := conn.Write(pgMessage(0, body)); err != nil {
		return err
	}
	if err := pgUntilReady(r); err != nil {
		return err
	}
	if query != "" {
		if _, err := conn.Write(pgMessage('Q', append([]byte(query), 0))); err != nil {
			return err
		}
		if err := pgUntilReady(r); err != nil {
			return err
		}
	}
	_, _ = conn.Write(pgMessage('X', nil))
	return nil
}

// pgMessage frames a message: type byte (none for the startup message), int32 length
// counting itself, body.
func pgMessage(typ byte, body []byte) []byte {
	var b []byte
	if typ != 0 {
		b = append(b, typ)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)))
	return append(b, body...)
}

// pgUntilReady reads messages up to ReadyForQuery and returns the first error reported.
func pgUntilReady(r *bufio.Reader) error {
	var first error
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if first != nil {
				return first // postgres closes the connection after a FATAL error
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("postgres: bad message length %d", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch hdr[0] {
		case 'R': // Authentication*: only AuthenticationOk (0) is expected with trust
			if len(body) < 4 {
				return errors.New("postgres: short authentication message")
			}
			if code := binary.BigEndian.Uint32(body); code != 0 {
				return fmt.Errorf("postgres: asks for authentication method %d; the launcher uses trust", code)
			}
		case 'E':
			if first == nil {
				first = parsePGError(body)
			}
		case 'Z':
			return first
		}
	}
}

// parsePGError decodes an ErrorResponse: fields of a type byte and a C string, ended by 0.
func parsePGError(body []byte) *pgError {
	e := &pgError{}
	for len(body) > 1 {
		typ := body[0]
		end := strings.IndexByte(string(body[1:]), 0)
		if end < 0 {
			break
		}
		val := string(body[1 : 1+end])
		body = body[2+end:]
		switch typ {
		case 'S':
			e.severity = val
		case 'C':
			e.code = val
		case 'M':
			e.message = val
		}
	}
	return e
}
