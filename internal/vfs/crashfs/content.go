package crashfs

import (
	"slices"
	"time"
)

const pageSize = 4 << 10

// page is never modified once it is in a content: a write replaces it.
type page [pageSize]byte

var zeroPage page

// content is a file's bytes and the time they last changed. len(pages)
// covers size; a nil page is zeros, and every byte of the last page beyond
// size is zero, so growing a file needs no clearing.
type content struct {
	size  int64
	pages []*page
	mtime time.Time
}

// clone shares the pages: they are immutable.
func (c content) clone() content {
	return content{size: c.size, pages: slices.Clone(c.pages), mtime: c.mtime}
}

func pagesFor(size int64) int64 { return (size + pageSize - 1) / pageSize }

// resize sets the size, dropping or zero-extending the end.
func (c *content) resize(size int64) {
	n := pagesFor(size)
	if size < c.size {
		clear(c.pages[n:])
		c.pages = c.pages[:n]
		if cut := size % pageSize; cut != 0 && c.pages[n-1] != nil {
			p := *c.pages[n-1]
			clear(p[cut:])
			c.pages[n-1] = keep(&p)
		}
	} else {
		for int64(len(c.pages)) < n {
			c.pages = append(c.pages, nil)
		}
	}
	c.size = size
}

// keep returns p, or nil if it holds only zeros.
func keep(p *page) *page {
	if *p == zeroPage {
		return nil
	}
	return p
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), pageSize)
		if string(b[:n]) != string(zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// write puts data at off, growing the file as needed; a nil data stands
// for n zero bytes.
func (c *content) write(off int64, data []byte, n int64) {
	if end := off + n; end > c.size {
		c.resize(end)
	}
	for n > 0 {
		i, at := off/pageSize, off%pageSize
		k := min(n, pageSize-at)
		var chunk []byte
		if data != nil {
			chunk, data = data[:k], data[k:]
		}
		old := c.pages[i]
		if old != nil || (chunk != nil && !allZero(chunk)) {
			p := new(page)
			if old != nil {
				*p = *old
			}
			if chunk == nil {
				clear(p[at : at+k])
			} else {
				copy(p[at:], chunk)
			}
			c.pages[i] = keep(p)
		}
		off, n = off+k, n-k
	}
}

// readAt copies what the file holds at off into p and returns how much.
func (c *content) readAt(p []byte, off int64) int {
	if off >= c.size {
		return 0
	}
	p = p[:min(int64(len(p)), c.size-off)]
	done := 0
	for done < len(p) {
		i, at := off/pageSize, off%pageSize
		var k int
		if pg := c.pages[i]; pg != nil {
			k = copy(p[done:], pg[at:])
		} else {
			k = len(clear0(p[done:min(len(p), done+int(pageSize-at))]))
		}
		done += k
		off += int64(k)
	}
	return done
}

func clear0(b []byte) []byte {
	clear(b)
	return b
}

// op is one change to a file made since its last fsync.
type op struct {
	trunc bool
	off   int64  // where a write starts, or the size a truncate sets
	n     int64  // bytes written
	data  []byte // nil: n zero bytes
	at    time.Time
}

func (o op) apply(c *content) {
	if o.trunc {
		c.resize(o.off)
	} else {
		c.write(o.off, o.data, o.n)
	}
	c.mtime = o.at
}

// torn is the first m bytes of a write.
func (o op) torn(m int64) op {
	t := op{off: o.off, n: m, at: o.at}
	if o.data != nil {
		t.data = o.data[:m]
	}
	return t
}
