package wire

import (
	"github.com/posgate/posgate/internal/money"
)

// MaxCatalogBytes bounds a catalog message.
const MaxCatalogBytes = 32 << 20

// CatalogItem is one sellable item of a store's catalog.
type CatalogItem struct {
	SKU     string    `json:"sku"`
	Barcode string    `json:"barcode,omitempty"`
	Name    string    `json:"name"`
	Price   money.Fen `json:"price"`
}

// Catalog is the store's retained catalog message. Terminals keep the highest Version they
// have seen and price from it, also offline.
type Catalog struct {
	V       int           `json:"v"`
	Store   string        `json:"store"`
	Version int64         `json:"version"`
	Items   []CatalogItem `json:"items"`
	// Key is the store's public ed25519 key (base64), Sig the signature of the catalog by it
	// (base64, SignCatalog). A terminal takes only a catalog signed by the key it pinned
	// (VerifyCatalog): any client of an anonymous broker can retain a catalog on the topic.
	Key string `json:"key,omitempty"`
	Sig string `json:"sig,omitempty"`
}

// DecodeCatalog strictly decodes and checks a catalog message: version, unique SKUs and
// barcodes, prices from 0 to MaxAmount.
func DecodeCatalog(b []byte) (Catalog, error) {
	var c Catalog
	if len(b) > MaxCatalogBytes {
		return c, invalid(CodeOversize, "catalog of %d bytes is over the %d byte limit", len(b), MaxCatalogBytes)
	}
	if err := decodeStrict(b, &c); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate checks a catalog.
func (c *Catalog) Validate() error {
	switch {
	case c.V != Version:
		return invalid(CodeVersion, "catalog protocol version %d is not supported", c.V)
	case !ValidID(c.Store):
		return invalid(CodeID, "catalog store id %q is not valid", c.Store)
	case c.Version <= 0:
		return invalid(CodePayload, "catalog version must be positive")
	case len(c.Key) > 64 || len(c.Sig) > 128:
		return invalid(CodePayload, "a catalog's key is at most 64 characters and its signature 128")
	}
	skus := make(map[string]bool, len(c.Items))
	codes := make(map[string]bool, len(c.Items))
	for _, it := range c.Items {
		switch {
		case !textOK(it.SKU, true) || !textOK(it.Name, false) || !textOK(it.Barcode, false):
			return invalid(CodePayload, "catalog item needs a sku (names and barcodes at most %d characters)", MaxTextLen)
		case skus[it.SKU]:
			return invalid(CodePayload, "catalog lists sku %q twice", it.SKU)
		case it.Barcode != "" && codes[it.Barcode]:
			return invalid(CodePayload, "catalog lists barcode %q twice", it.Barcode)
		case it.Price < 0:
			return invalid(CodeAmount, "sku %q has a negative price", it.SKU)
		case it.Price > MaxAmount:
			// A till refuses every scan of it (a unit price above what one event may carry).
			return invalid(CodeTooLarge, "sku %q: price %s is above the %s one event may carry", it.SKU, it.Price, MaxAmount)
		}
		skus[it.SKU] = true
		if it.Barcode != "" {
			codes[it.Barcode] = true
		}
	}
	return nil
}
