package main

import (
	"strings"
	"testing"

	chrome "github.com/posgate/posgate/e2e/browser"
)

// browser is the dashboard's tests' headless Chromium (e2e/browser, over the DevTools
// protocol), for the dashboard's clicks and prompts.
type browser struct{ *chrome.Browser }

// startBrowser starts a headless Chromium, ended when the test ends.
func startBrowser(t *testing.T) *browser { return &browser{chrome.Start(t, "")} }

func (b *browser) open(url string) { b.Open(url) }

// text returns the visible text of the first element matching css, its table cells
// separated by spaces.
func (b *browser) text(css string) string { return strings.ReplaceAll(b.Text(css), "\t", " ") }

func (b *browser) click(css string) { b.Click(css) }

func (b *browser) answerPrompt(text string) string { return b.AnswerPrompt(text) }

func (b *browser) acceptDialog() string { return b.AcceptDialog() }

// waitDialog waits for a dialog to open and returns its message, leaving it open.
func (b *browser) waitDialog() string { return b.WaitDialog() }

func (b *browser) until(what string, ok func() bool) { b.Until(what, ok) }

// waitText waits until the element matching css shows text containing want.
func (b *browser) waitText(css, want string) {
	b.Until(css+" to show "+want, func() bool { return strings.Contains(b.text(css), want) })
}

// browse loads url in headless Chromium, waits until the page has drawn its data once and
// returns its HTML.
func browse(t *testing.T, url string) string { t.Helper(); return chrome.Browse(t, url) }
