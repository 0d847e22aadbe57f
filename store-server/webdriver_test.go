package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
)

// browser is a headless Chromium driven through chromedriver's WebDriver HTTP API, for the
// dashboard's clicks and prompts (browse covers what a page shows without them).
type browser struct {
	t       *testing.T
	base    string // http://127.0.0.1:port/session/id
	timeout time.Duration
}

// webElement is the WebDriver key of an element reference.
const webElement = "element-6066-11e4-a52e-4f735466cecf"

// startBrowser starts chromedriver on a free port and a headless Chromium session, both
// ended when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	driver, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Fatalf("chromedriver is needed for the dashboard's click tests (make deps installs chromium-driver): %v", err)
	}
	addr, err := e2e.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(driver, "--port="+addr[strings.LastIndex(addr, ":")+1:])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b := &browser{t: t, base: "http://" + addr, timeout: 10 * time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(b.base + "/status"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chromedriver did not start")
		}
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	b.call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": "/usr/bin/chromium",
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir()}},
	}}}, &s)
	b.base += "/session/" + s.SessionID
	t.Cleanup(func() { b.call("DELETE", "", nil, nil) })
	return b
}

// call sends one WebDriver command and decodes its value into out (if not nil).
func (b *browser) call(method, path string, in, out any) {
	b.t.Helper()
	if err := b.try(method, path, in, out); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) try(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("webdriver %s %s: %d: %v", method, path, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %d %s", method, path, resp.StatusCode, answer.Value)
	}
	if out != nil {
		return json.Unmarshal(answer.Value, out)
	}
	return nil
}

// open loads url.
func (b *browser) open(url string) {
	b.t.Helper()
	b.call("POST", "/url", map[string]string{"url": url}, nil)
}

// find returns the first element matching css, waiting for it.
func (b *browser) find(css string) string {
	b.t.Helper()
	var el map[string]string
	b.until("an element "+css, func() bool {
		return b.try("POST", "/element", map[string]string{"using": "css selector", "value": css}, &el) == nil
	})
	return el[webElement]
}

// text returns the visible text of the first element matching css.
func (b *browser) text(css string) string {
	b.t.Helper()
	var s string
	if err := b.try("GET", "/element/"+b.find(css)+"/text", nil, &s); err != nil {
		return "" // redrawn meanwhile: the caller waits for the next draw
	}
	return s
}

// click clicks the first element matching css.
func (b *browser) click(css string) {
	b.t.Helper()
	b.call("POST", "/element/"+b.find(css)+"/click", map[string]any{}, nil)
}

// answerPrompt waits for a prompt, types text into it and accepts it; it returns the
// prompt's message.
func (b *browser) answerPrompt(text string) string {
	b.t.Helper()
	var msg string
	b.until("a prompt", func() bool { return b.try("GET", "/alert/text", nil, &msg) == nil })
	b.call("POST", "/alert/text", map[string]string{"text": text}, nil)
	b.call("POST", "/alert/accept", map[string]any{}, nil)
	return msg
}

// acceptDialog waits for an alert or a confirm, accepts it and returns its message.
func (b *browser) acceptDialog() string {
	b.t.Helper()
	var msg string
	b.until("a dialog", func() bool { return b.try("GET", "/alert/text", nil, &msg) == nil })
	b.call("POST", "/alert/accept", map[string]any{}, nil)
	return msg
}

// waitText waits until the element matching css shows text containing want.
func (b *browser) waitText(css, want string) {
	b.t.Helper()
	b.until(fmt.Sprintf("%s to show %q", css, want), func() bool { return strings.Contains(b.text(css), want) })
}

func (b *browser) until(what string, ok func() bool) {
	b.t.Helper()
	for deadline := time.Now().Add(b.timeout); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			var src string
			b.try("GET", "/source", nil, &src)
			b.t.Fatalf("waited %v for %s; page:\n%.3000s", b.timeout, what, src)
		}
	}
}
