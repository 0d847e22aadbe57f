package e2e

import (
	"fmt"
	"time"
)

// ZoneWithMidnight returns the first whole minute at or after t and a fixed zone
// (UTC+hh:mm, within ±14:00, as internal/wire reads it) in which that minute is midnight. A
// store that keeps the clock of that zone ends its business day then: a run can trade a
// day, close it at the tills, and have it declared to HQ and reconciled, within minutes.
func ZoneWithMidnight(t time.Time) (time.Time, string) {
	m := t.UTC().Truncate(time.Minute)
	if m.Before(t) {
		m = m.Add(time.Minute)
	}
	mins := m.Hour()*60 + m.Minute() // the offset is -mins or 24h - mins
	off := -mins
	if mins > 14*60 {
		off = 24*60 - mins
	}
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	return m, fmt.Sprintf("UTC%s%02d:%02d", sign, off/60, off%60)
}
