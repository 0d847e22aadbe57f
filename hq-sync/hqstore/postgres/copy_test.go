package postgres

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
)

// TestCopyStream reads back the binary COPY stream of two rows, one without a payload,
// field by field as PostgreSQL does: the header, 16 fields a tuple (text as its bytes,
// bigint as 8 big-endian bytes, a NULL as length -1), the trailer. The tests that store
// through a real PostgreSQL (storetest's) check that it takes them.
func TestCopyStream(t *testing.T) {
	at := time.Date(2025, 3, 1, 10, 0, 1, 500_000_000, time.FixedZone("", 8*3600))
	rows := []*hqwire.Row{
		{Kind: "sale", Terminal: "T1", Seq: 7, BusinessDate: "2025-03-01", FlowNo: 3, At: at, Hash: "ab",
			Amount: 137, ByMethod: map[string]money.Fen{"card": 100, "cash": 37}, Payload: []byte(`{"x":1}`)},
		{Kind: "day_close", Terminal: "T1", Seq: 8, BusinessDate: "2025-03-01", At: at, Hash: "cd"},
	}
	enc := &copyEncoder{rows: rows, store: "S1", batch: "b-1", ms: 1234}
	var got bytes.Buffer
	if _, err := io.CopyBuffer(&got, enc, make([]byte, 7)); err != nil { // small reads: a tuple across them
		t.Fatal(err)
	}
	b := got.Bytes()
	if !bytes.HasPrefix(b, []byte(copyHeader)) || len(copyHeader) != 19 {
		t.Fatalf("header %q", b[:min(len(b), 19)])
	}
	b = b[19:]
	u16 := func() int { v := int16(binary.BigEndian.Uint16(b)); b = b[2:]; return int(v) }
	field := func() []byte {
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if n < 0 {
			return nil
		}
		v := b[:n]
		b = b[n:]
		return v
	}
	int8 := func(f []byte) int64 {
		if len(f) != 8 {
			t.Fatalf("bigint of %d bytes", len(f))
		}
		return int64(binary.BigEndian.Uint64(f))
	}
	type tuple struct {
		texts   [7]string // store terminal kind business_date at hash batch_id
		ints    [8]int64  // seq flow_no amount cash card qr methods received_ms
		payload []byte
	}
	var tuples []tuple
	for {
		n := u16()
		if n == -1 {
			break
		}
		if n != len(rowCols) {
			t.Fatalf("a tuple of %d fields, want %d", n, len(rowCols))
		}
		var tp tuple
		f := make([][]byte, n)
		for i := range f {
			f[i] = field()
		}
		for i, c := range []int{0, 1, 3, 4, 6, 7, 14} {
			tp.texts[i] = string(f[c])
		}
		for i, c := range []int{2, 5, 8, 9, 10, 11, 12, 15} {
			tp.ints[i] = int8(f[c])
		}
		tp.payload = f[13]
		tuples = append(tuples, tp)
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after the trailer", len(b))
	}
	want := []tuple{
		{[7]string{"S1", "T1", "sale", "2025-03-01", "2025-03-01T02:00:01.5Z", "ab", "b-1"},
			[8]int64{7, 3, 137, 37, 100, 0, 3, 1234}, []byte(`{"x":1}`)},
		{[7]string{"S1", "T1", "day_close", "2025-03-01", "2025-03-01T02:00:01.5Z", "cd", "b-1"},
			[8]int64{8, 0, 0, 0, 0, 0, 0, 1234}, nil},
	}
	if len(tuples) != len(want) {
		t.Fatalf("%d tuples, want %d", len(tuples), len(want))
	}
	for i := range want {
		g, w := tuples[i], want[i]
		if g.texts != w.texts || g.ints != w.ints || !bytes.Equal(g.payload, w.payload) || (g.payload == nil) != (w.payload == nil) {
			t.Errorf("tuple %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}
