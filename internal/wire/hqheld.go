package wire

import "time"

// HQHeld is the store's retained message to its terminals on HQHeldTopic: Through is the
// last business day HQ has acknowledged whole, with every earlier day the store's ledger
// holds. A terminal keeps its acknowledged events of a day at least until HQ holds that day
// (and for its minimum retention): until then they are what refills a store's ledger lost
// with its disk.
type HQHeld struct {
	V       int       `json:"v"`
	Store   string    `json:"store"`
	Through string    `json:"through"` // YYYY-MM-DD
	At      time.Time `json:"at"`      // when the store read it from its uploader's state
}

// HQHeldTopic carries the store's retained HQHeld message.
func HQHeldTopic(store string) string { return "pos/" + store + "/hq" }

// DecodeHQHeld strictly decodes the store's HQHeld message.
func DecodeHQHeld(b []byte) (HQHeld, error) {
	var h HQHeld
	if len(b) > MaxPresenceBytes {
		return h, invalid(CodeOversize, "hq message of %d bytes is over the %d byte limit", len(b), MaxPresenceBytes)
	}
	if err := decodeStrict(b, &h); err != nil {
		return h, err
	}
	switch {
	case h.V != Version:
		return h, invalid(CodeVersion, "protocol version %d is not supported", h.V)
	case !ValidID(h.Store):
		return h, invalid(CodeID, "hq message store id %q is not valid", h.Store)
	case !validDate(h.Through):
		return h, invalid(CodePayload, "hq message day %q is not YYYY-MM-DD", h.Through)
	}
	return h, nil
}
