//go:build unix

package stack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The launcher speaks just enough RESP2 to probe redis and sentinel: one command per
// connection, no pool, no retries. Keeping this out of go-redis keeps the launcher's own
// checks independent of the client library under test.

// respError is an error reply ("-ERR ...") from redis or sentinel.
type respError string

func (e respError) Error() string { return string(e) }

// command sends one command to addr on a fresh connection and returns the decoded reply:
// string, int64, nil, []any or a respError. Each call is bounded by ctx and by 3 seconds.
func command(ctx context.Context, addr string, args ...string) (any, error) {
	return commandAuth(ctx, addr, "", args...)
}

// commandAuth is command on a server that asks for a password: AUTH password first on the
// same connection ("" sends no AUTH).
func commandAuth(ctx context.Context, addr, password string, args ...string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var b strings.Builder
	if password != "" {
		writeCommand(&b, "AUTH", password)
	}
	writeCommand(&b, args...)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if v, err := readReply(r); err != nil {
			return nil, err
		} else if e, ok := v.(respError); ok {
			return nil, fmt.Errorf("AUTH: %w", e)
		}
	}
	v, err := readReply(r)
	if err != nil {
		return nil, err
	}
	if e, ok := v.(respError); ok {
		return nil, e
	}
	return v, nil
}

func writeCommand(b *strings.Builder, args ...string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

// commandString is command for replies that are a simple or bulk string.
func commandString(ctx context.Context, addr string, args ...string) (string, error) {
	return commandStringAuth(ctx, addr, "", args...)
}

// commandStringAuth is commandString with AUTH password first.
func commandStringAuth(ctx context.Context, addr, password string, args ...string) (string, error) {
	v, err := commandAuth(ctx, addr, password, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s: unexpected reply %v", addr, args[0], v)
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("resp: empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("resp: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("resp: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("resp: unexpected reply %q", line)
	}
}

// flatMap turns a RESP2 flat key/value array (as SENTINEL MASTER returns) into a map.
func flatMap(v any) map[string]string {
	arr, _ := v.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		switch x := arr[i+1].(type) {
		case string:
			m[k] = x
		case int64:
			m[k] = strconv.FormatInt(x, 10)
		}
	}
	return m
}

// infoField returns the value of field in an INFO reply ("field:value" lines).
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}
