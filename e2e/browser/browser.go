// Package browser drives a headless Chromium over the DevTools protocol (chromedp) for the
// pages' tests: the store dashboard's and HQ's. It is part of the end-to-end harness, apart
// from package e2e so that the demo, which runs e2e, does not carry the browser's client.
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Browser is a headless Chromium driven over the DevTools protocol (chromedp), for the
// pages' tests: it loads a page, waits for what it shows, clicks, answers its prompts and
// dialogs, runs script in it and takes screenshots. Debian's chromium (make deps) is the
// browser.
type Browser struct {
	t       testing.TB
	ctx     context.Context
	Timeout time.Duration

	mu      sync.Mutex
	dialogs []string // messages of the dialogs open, oldest first
	opened  chan struct{}
}

// Start starts a headless Chromium whose languages are langs (e.g. "zh-CN,zh"; ""
// leaves Chromium's own), ended when the test ends.
func Start(t testing.TB, langs string) *Browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is needed for the pages' tests (make deps installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	if langs != "" {
		opts = append(opts, chromedp.Flag("lang", strings.Split(langs, ",")[0]), chromedp.Flag("accept-lang", langs))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx, Timeout: 15 * time.Second, opened: make(chan struct{}, 16)}
	err = chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.mu.Lock()
			b.dialogs = append(b.dialogs, e.Message)
			b.mu.Unlock()
			select {
			case b.opened <- struct{}{}:
			default:
			}
		}
	})
	if err != nil { // Listen starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return b
}

// run runs actions within the browser's timeout.
func (b *Browser) run(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, b.Timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// evaluate runs js in b's page and returns its value, within b's timeout.
func evaluate[T any](b *Browser, js string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.Timeout)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// Open loads url.
func (b *Browser) Open(url string) {
	b.t.Helper()
	if err := b.run(chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
}

// Eval runs js in the page and stores its JSON value in out.
func (b *Browser) Eval(js string, out any) error {
	raw, err := evaluate[json.RawMessage](b, "JSON.stringify("+js+")")
	if err != nil {
		return err
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return fmt.Errorf("evaluate %.60s: %w", js, err)
	}
	return json.Unmarshal([]byte(text), out)
}

// Text returns the visible text of the first element matching css ("" while there is none).
func (b *Browser) Text(css string) string {
	var s string
	if err := b.Eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : ""; })()`, css), &s); err != nil {
		return ""
	}
	return s
}

// DOM returns the page's HTML as it stands.
func (b *Browser) DOM() string {
	var s string
	b.Eval(`document.documentElement.outerHTML`, &s)
	return s
}

// Until waits until ok holds, failing the test with the page's HTML after the timeout.
func (b *Browser) Until(what string, ok func() bool) {
	b.t.Helper()
	for deadline := time.Now().Add(b.Timeout); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.t.Fatalf("waited %v for %s; page:\n%.3000s", b.Timeout, what, b.DOM())
		}
	}
}

// WaitText waits until the element matching css shows text containing want.
func (b *Browser) WaitText(css, want string) {
	b.t.Helper()
	b.Until(fmt.Sprintf("%s to show %q", css, want), func() bool { return strings.Contains(b.Text(css), want) })
}

// WaitDrawn waits until the page has drawn after its data arrived at least n times
// (document.body.dataset.drawn, which the pages set after each refresh).
func (b *Browser) WaitDrawn(n int) {
	b.t.Helper()
	b.Until(fmt.Sprintf("the page's draw #%d", n), func() bool {
		var d int
		return b.Eval(`Number(document.body.dataset.drawn || 0)`, &d) == nil && d >= n
	})
}

// Click clicks the first element matching css. A click that opens a dialog (prompt,
// confirm, alert) returns once the dialog is open: AnswerPrompt or AcceptDialog handles it.
func (b *Browser) Click(css string) {
	b.t.Helper()
	b.Until("an element "+css, func() bool {
		var n int
		return b.Eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, css), &n) == nil && n > 0
	})
	done := make(chan error, 1)
	go func() { done <- b.run(chromedp.Click(chromedp.CSS(css))) }()
	select {
	case err := <-done:
		if err != nil {
			b.t.Fatalf("click %s: %v", css, err)
		}
	case <-b.opened:
		b.opened <- struct{}{} // for the dialog's handler
	case <-time.After(b.Timeout):
		b.t.Fatalf("click %s: no answer in %v", css, b.Timeout)
	}
}

// dialog waits for a dialog, closes it (accepting it with text when it is a prompt) and
// returns its message.
func (b *Browser) dialog(accept bool, text string) string {
	b.t.Helper()
	var msg string
	b.Until("a dialog", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.dialogs) == 0 {
			return false
		}
		msg, b.dialogs = b.dialogs[0], b.dialogs[1:]
		return true
	})
	select {
	case <-b.opened:
	default:
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.Timeout)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept,
		PromptText: text}); err != nil {
		b.t.Fatalf("answer the dialog %q: %v", msg, err)
	}
	return msg
}

// WaitDialog waits for a dialog to open and returns its message, leaving it open.
func (b *Browser) WaitDialog() string {
	b.t.Helper()
	var msg string
	b.Until("a dialog", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.dialogs) > 0 {
			msg = b.dialogs[0]
		}
		return len(b.dialogs) > 0
	})
	return msg
}

// AnswerPrompt waits for a prompt, types text into it and accepts it; it returns the
// prompt's message.
func (b *Browser) AnswerPrompt(text string) string { b.t.Helper(); return b.dialog(true, text) }

// AcceptDialog waits for an alert or a confirm, accepts it and returns its message.
func (b *Browser) AcceptDialog() string { b.t.Helper(); return b.dialog(true, "") }

// Screenshot writes a PNG of the whole page to path.
func (b *Browser) Screenshot(path string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// Browse loads url in a new headless Chromium, waits until the page has drawn its data
// once, and returns its HTML.
func Browse(t testing.TB, url string) string {
	t.Helper()
	b := Start(t, "")
	b.Open(url)
	b.WaitDrawn(1)
	return b.DOM()
}
