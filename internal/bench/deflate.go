package bench

import (
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// Paddings of a message's data (--fill).
const (
	FillX    = "x"    // a run of x: compresses to almost nothing
	FillText = "text" // varied words and numbers: compresses like real JSON text
)

// textCorpus is the text --fill text copies windows of: item records with
// varied names and numbers, no quote or backslash (it fills a JSON string).
var textCorpus = func() []byte {
	rnd := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "bravo", "price", "stock", "order", "status", "open", "closed", "user", "room", "tag", "note", "east", "west", "ok"}
	var b []byte
	for len(b) < 1<<17 {
		b = append(b, "id "...)
		b = strconv.AppendInt(b, rnd.Int64N(100000), 10)
		b = append(b, " name item-"...)
		b = strconv.AppendInt(b, rnd.Int64N(1000), 10)
		b = append(b, ' ')
		b = append(b, words[rnd.IntN(len(words))]...)
		b = append(b, " price "...)
		b = strconv.AppendFloat(b, float64(rnd.IntN(100000))/100, 'f', 2, 64)
		b = append(b, " tags "...)
		b = append(b, words[rnd.IntN(len(words))]...)
		b = append(b, ',', ' ')
	}
	return b
}()

// fillText overwrites the x padding of a data object (appendData) with a
// window of textCorpus chosen by idx; the length stays the same.
func fillText(data []byte, idx uint64) {
	const key = `"x":"`
	i := 0
	for ; i+len(key) <= len(data); i++ {
		if string(data[i:i+len(key)]) == key {
			break
		}
	}
	start, end := i+len(key), len(data)-2 // before the closing "}
	if start >= end {
		return
	}
	n := end - start
	off := int(idx*7919) % (len(textCorpus) - n)
	copy(data[start:end], textCorpus[off:off+n])
}

// parseHeader parses a server frame header, RSV1 allowed on a connection
// that negotiated permessage-deflate.
func parseHeader(b []byte, deflate bool) (wsframe.Header, int, error) {
	if deflate {
		return wsframe.ParseHeaderDeflate(b, false)
	}
	return wsframe.ParseHeader(b, false)
}

var inflateBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// messageZ handles a data message, inflating it first when compressed.
func (c *wsConn) messageZ(op byte, z bool, p []byte) {
	if !z {
		c.message(op, p)
		return
	}
	bp := inflateBufs.Get().(*[]byte)
	out, err := wsframe.AppendInflate((*bp)[:0], p, maxLoopMessage)
	if err != nil {
		inflateBufs.Put(bp)
		c.end(1006) // as client.Conn: a bad message breaks the connection
		return
	}
	c.message(op, out)
	*bp = out[:0]
	inflateBufs.Put(bp)
}
