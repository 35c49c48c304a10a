package datafile

import (
	"bytes"
	"encoding/binary"
)

// SalvagedRecord is a record Salvage found.
type SalvagedRecord struct {
	Offset  int64  // in the file (base plus the position in the input)
	Payload []byte // aliases the input
}

// Gap is a byte range of a file in which Salvage found no record.
type Gap struct {
	Offset, Length int64
}

// Salvage scans b, the bytes of a segment from offset base on (typically
// from a damaged record to the end), for records whose checksum still
// verifies, so that whoever cuts damage off a log can say what the cut
// discards. Where records follow each other it walks them; elsewhere it
// tries every byte. Footers are stepped over; the bytes where no record
// was found are returned as gaps, except zero padding at the very end.
//
// A record found this way proves only that its own bytes are intact, not
// that it belongs where it sits: it is for reporting, never for keeping.
// Trying every byte of a damaged region costs a checksum per plausible
// candidate, so the work is capped as in the reader's search for a record
// after damage; once the cap is hit the rest of b is one gap.
func Salvage(b []byte, base int64) (recs []SalvagedRecord, gaps []Gap) {
	budget := 64<<20 + 4*len(b)
	end := len(bytes.TrimRight(b, "\x00"))
	gap := -1 // start of the open gap, -1 if none
	closeGap := func(p int) {
		if gap >= 0 {
			gaps = append(gaps, Gap{Offset: base + int64(gap), Length: int64(p - gap)})
			gap = -1
		}
	}
	for p := 0; p < end; {
		if n, ok := salvageAt(b, p, end, &budget); ok {
			closeGap(p)
			recs = append(recs, SalvagedRecord{Offset: base + int64(p), Payload: b[p+RecordHeaderSize : p+RecordHeaderSize+n]})
			p += RecordHeaderSize + n
			continue
		}
		if budget < 0 {
			if gap < 0 {
				gap = p
			}
			break
		}
		if p+FooterSize <= len(b) && binary.LittleEndian.Uint32(b[p:]) == footerMarker && bytes.Equal(b[p+48:p+52], footerMagic[:]) {
			closeGap(p)
			p += FooterSize
			continue
		}
		if gap < 0 {
			gap = p
		}
		p++
	}
	closeGap(end)
	return recs, gaps
}

// salvageAt reports whether a record with a matching checksum starts at
// b[p:], returning its payload length. As in findRecord, a candidate is
// hashed only if what follows it could be the file's continuation, and
// every byte hashed is charged to budget.
func salvageAt(b []byte, p, end int, budget *int) (int, bool) {
	if p+RecordHeaderSize > len(b) {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(b[p:]))
	if n == 0 || n > MaxRecordBytes || n > len(b)-p-RecordHeaderSize {
		return 0, false
	}
	if q := p + RecordHeaderSize + n; q < end && q+4 <= len(b) {
		next := binary.LittleEndian.Uint32(b[q:])
		if next != footerMarker && int(next) > len(b)-q-RecordHeaderSize {
			return 0, false
		}
	}
	if *budget -= n; *budget < 0 {
		return 0, false
	}
	return n, recordAt(b, p)
}
