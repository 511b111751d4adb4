package gateway

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

// The TLS 1.3 record layer of a connection held by the event loop
// (RFC 8446 §5). crypto/tls does the handshake (tlsaccept.go); the
// traffic secrets it derives are taken over here, and from then on the
// loop decrypts what it reads in place in its shared buffer and the
// writer seals queued frames into a pooled scratch buffer. An idle
// connection keeps its two AEAD states (under 2 KB) and nothing else: a
// record split over reads is kept only while it is incomplete, and only
// the unsent rest of a short write is copied (into conn.wbuf).
//
// Only what a server needs after the handshake is handled: application
// data, alerts (any alert ends the connection), KeyUpdate and the
// compatibility ChangeCipherSpec (dropped, as crypto/tls does). The node
// sends no NewSessionTicket (tickets are disabled), and any other
// handshake message from the client is an error. A run of more than
// maxUselessRecords records without application data (empty or
// padding-only ones, ChangeCipherSpec, KeyUpdate) ends the connection,
// as crypto/tls does. The node sends its own KeyUpdate after
// keyUpdateAfter records under one key, well before the AEAD limits of
// RFC 8446 §5.5 (AES-GCM: 2^24.5 records).

const (
	recordHeaderLen = 5
	maxPlaintext    = 1 << 14       // bytes of plaintext in a record
	maxCiphertext   = 1<<14 + 256   // RFC 8446 §5.2
	recordOverhead  = 1 + 16        // inner content type and AEAD tag
	sealBatch       = 4 * (1 << 14) // plaintext sealed per write (frames are never split across batches)

	recordAppData   = 23
	recordAlert     = 21
	recordHandshake = 22
	recordCCS       = 20

	maxUselessRecords = 16 // as crypto/tls's

	hsKeyUpdate = 24
)

var (
	errRecordMAC      = errors.New("tls: record authentication failed")
	errRecordOverflow = errors.New("tls: record too large")
	errRecordType     = errors.New("tls: unexpected record type")
	errRecordNoType   = errors.New("tls: record without a content type")
	errCloseNotify    = errors.New("tls: close_notify from the peer")
	errHandshakeMsg   = errors.New("tls: unexpected handshake message after the handshake")
	errUselessRecords = errors.New("tls: too many records without application data in a row")
	errCCS            = errors.New("tls: malformed ChangeCipherSpec")
)

// keyUpdateAfter is the number of records the node seals under one key
// before it sends a KeyUpdate and moves to the next one (a variable for
// the tests).
var keyUpdateAfter uint64 = 1 << 22

// trafficKeys protect one direction: the key, its static IV, the record
// sequence number and the traffic secret (for KeyUpdate). The AEAD built
// from the key (its expanded AES key schedule and GHASH table: ~800 B)
// is kept while the direction is in use and dropped once it has been
// idle for a sweep (see tlsState.idle): an idle connection keeps its
// keys only, and rebuilding costs BenchmarkTLSKeysRebuild.
type trafficKeys struct {
	aead      cipher.AEAD // nil: build it from key (aeadNow)
	used      bool        // sealed or opened since the last sweep
	suite     uint16
	keyLen    uint8
	secretLen uint8
	key       [32]byte
	iv        [12]byte
	seq       uint64
	secret    [48]byte
}

// suiteHash is the hash of a TLS 1.3 cipher suite and its key length.
func suiteHash(suite uint16) (func() hash.Hash, int, error) {
	switch suite {
	case tls.TLS_AES_128_GCM_SHA256:
		return sha256.New, 16, nil
	case tls.TLS_AES_256_GCM_SHA384:
		return sha512.New384, 32, nil
	case tls.TLS_CHACHA20_POLY1305_SHA256:
		return sha256.New, 32, nil
	}
	return nil, 0, fmt.Errorf("tls: cipher suite %#04x is not a TLS 1.3 suite", suite)
}

// expandLabel is HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
func expandLabel(h func() hash.Hash, secret []byte, label string, n int) []byte {
	info := make([]byte, 0, 4+6+len(label))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0) // context: empty
	out, err := hkdf.Expand(h, secret, string(info), n)
	if err != nil {
		panic(err) // only for lengths far beyond these
	}
	return out
}

// newTrafficKeys derives a direction's key and IV from its traffic secret.
func newTrafficKeys(suite uint16, secret []byte) (trafficKeys, error) {
	k := trafficKeys{suite: suite}
	return k, k.setSecret(secret)
}

func (k *trafficKeys) setSecret(secret []byte) error {
	h, keyLen, err := suiteHash(k.suite)
	if err != nil {
		return err
	}
	if len(secret) > len(k.secret) {
		return fmt.Errorf("tls: traffic secret of %d bytes", len(secret))
	}
	k.keyLen = uint8(copy(k.key[:], expandLabel(h, secret, "key", keyLen)))
	copy(k.iv[:], expandLabel(h, secret, "iv", 12))
	k.secretLen = uint8(copy(k.secret[:], secret))
	k.seq, k.aead = 0, nil
	return nil
}

// aeadNow is the direction's AEAD, built from the key if it was dropped.
func (k *trafficKeys) aeadNow() cipher.AEAD {
	k.used = true
	if k.aead != nil {
		return k.aead
	}
	var err error
	key := k.key[:k.keyLen]
	if k.suite == tls.TLS_CHACHA20_POLY1305_SHA256 {
		k.aead, err = chacha20poly1305.New(key)
	} else {
		var b cipher.Block
		if b, err = aes.NewCipher(key); err == nil {
			k.aead, err = cipher.NewGCM(b)
		}
	}
	if err != nil {
		panic(err) // the key's length is the suite's
	}
	return k.aead
}

// idle drops the AEAD if the direction was not used since the last call.
func (k *trafficKeys) idle() {
	if !k.used {
		k.aead = nil
	}
	k.used = false
}

// update moves to the next traffic secret (RFC 8446 §7.2).
func (k *trafficKeys) update() error {
	h, _, err := suiteHash(k.suite)
	if err != nil {
		return err
	}
	return k.setSecret(expandLabel(h, k.secret[:k.secretLen], "traffic upd", int(k.secretLen)))
}

func (k *trafficKeys) nonce(out *[12]byte) []byte {
	*out = k.iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], k.seq)
	for i := range s {
		out[4+i] ^= s[i]
	}
	return out[:]
}

// sealAt seals the record that starts at b[start:]: a 5-byte header
// (reserved, filled here) followed by the plaintext up to len(b). The
// ciphertext replaces the plaintext in place; b grows by the overhead.
func (k *trafficKeys) sealAt(b []byte, start int, ctype byte) []byte {
	b = slices.Grow(b, recordOverhead)
	b = append(b, ctype)
	plain := b[start+recordHeaderLen:]
	hdr := b[start : start+recordHeaderLen]
	hdr[0], hdr[1], hdr[2] = recordAppData, 3, 3
	binary.BigEndian.PutUint16(hdr[3:], uint16(len(plain)+16))
	var nb [12]byte
	out := k.aeadNow().Seal(plain[:0], k.nonce(&nb), plain, hdr)
	k.seq++
	return b[:start+recordHeaderLen+len(out)]
}

// seal appends plain to dst as records of at most maxPlaintext bytes.
func (k *trafficKeys) seal(dst []byte, ctype byte, plain []byte) []byte {
	for first := true; first || len(plain) > 0; first = false {
		n := min(len(plain), maxPlaintext)
		start := len(dst)
		dst = append(append(dst, 0, 0, 0, 0, 0), plain[:n]...)
		dst = k.sealAt(dst, start, ctype)
		plain = plain[n:]
	}
	return dst
}

// open decrypts one whole record (header and body) in place and returns
// its inner content type and plaintext.
func (k *trafficKeys) open(rec []byte) (byte, []byte, error) {
	body := rec[recordHeaderLen:]
	if len(body) < 17 {
		return 0, nil, errRecordMAC
	}
	var nb [12]byte
	plain, err := k.aeadNow().Open(body[:0], k.nonce(&nb), body, rec[:recordHeaderLen])
	if err != nil {
		return 0, nil, errRecordMAC
	}
	k.seq++
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i-- // padding
	}
	if i < 0 {
		return 0, nil, errRecordNoType
	}
	if i > maxPlaintext {
		return 0, nil, errRecordOverflow
	}
	return plain[i], plain[:i], nil
}

// tlsState is a loop-held TLS connection's record layer, under conn.mu,
// but for rpart, which belongs to the reader (the loop).
type tlsState struct {
	in  trafficKeys
	out trafficKeys

	rpart     []byte // an incomplete record (reader only)
	useless   int    // records in a row without application data (reader only)
	keyUpdate bool   // the client asked for a KeyUpdate, or keyUpdateAfter: ours goes before the next record
}

// idle drops the AEADs not used since the last sweep (under conn.mu).
func (t *tlsState) idle() {
	t.in.idle()
	t.out.idle()
}

// readResult is what a run of records asked for besides their data.
type readResult struct {
	wantKeyUpdate bool  // the client's KeyUpdate had update_requested
	err           error // the connection must end (after the data before it)
}

// readRecords decrypts the whole records at the head of data in place.
// It returns their application data, moved to the front of data, and the
// incomplete record left at the end (a sub-slice of data). It stops at
// the first record that ends the connection (res.err).
func (t *tlsState) readRecords(data []byte) (app, rest []byte, res readResult) {
	w, off := 0, 0 // end of the application data moved to the front; next record
	for {
		if len(data)-off < recordHeaderLen {
			return data[:w], data[off:], res
		}
		hdr := data[off : off+recordHeaderLen]
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if hdr[0] == recordCCS {
			// A compatibility ChangeCipherSpec, in plaintext: dropped.
			if n != 1 {
				res.err = errCCS
				return data[:w], nil, res
			}
			if len(data)-off < recordHeaderLen+1 {
				return data[:w], data[off:], res
			}
			if data[off+recordHeaderLen] != 1 {
				res.err = errCCS
				return data[:w], nil, res
			}
			off += recordHeaderLen + 1
			if t.useless++; t.useless > maxUselessRecords {
				res.err = errUselessRecords
				return data[:w], nil, res
			}
			continue
		}
		if hdr[0] != recordAppData {
			res.err = errRecordType
			return data[:w], nil, res
		}
		if n > maxCiphertext {
			res.err = errRecordOverflow
			return data[:w], nil, res
		}
		if len(data)-off < recordHeaderLen+n {
			return data[:w], data[off:], res
		}
		ctype, plain, err := t.in.open(data[off : off+recordHeaderLen+n])
		off += recordHeaderLen + n
		if err != nil {
			res.err = err
			return data[:w], nil, res
		}
		if ctype == recordAppData && len(plain) > 0 {
			t.useless = 0
		} else if t.useless++; t.useless > maxUselessRecords && ctype != recordAlert {
			res.err = errUselessRecords
			return data[:w], nil, res
		}
		switch ctype {
		case recordAppData:
			w += copy(data[w:], plain)
		case recordAlert:
			if len(plain) == 2 && plain[1] == 0 {
				res.err = errCloseNotify
			} else if len(plain) == 2 {
				res.err = fmt.Errorf("tls: alert %d from the peer", plain[1])
			} else {
				res.err = errors.New("tls: malformed alert")
			}
			return data[:w], nil, res
		case recordHandshake:
			// Only a KeyUpdate may come, whole and last in its record
			// (a handshake message must not span a key change).
			if len(plain) != 5 || plain[0] != hsKeyUpdate || plain[1] != 0 || plain[2] != 0 || plain[3] != 1 || plain[4] > 1 {
				res.err = errHandshakeMsg
				return data[:w], nil, res
			}
			if err := t.in.update(); err != nil {
				res.err = err
				return data[:w], nil, res
			}
			if plain[4] == 1 {
				res.wantKeyUpdate = true
			}
		default:
			res.err = errRecordType
			return data[:w], nil, res
		}
	}
}

// keyUpdateMsg is our KeyUpdate (update_not_requested).
var keyUpdateMsg = []byte{hsKeyUpdate, 0, 0, 1, 0}

// closeNotifyAlert is a warning-level close_notify.
var closeNotifyAlert = []byte{1, 0}

// sealScratch is a writer's buffer for sealed records, borrowed from a
// pool for one write: a connection keeps none.
var sealScratch = sync.Pool{New: func() any {
	b := make([]byte, 0, sealBatch+4*(recordHeaderLen+recordOverhead))
	return &b
}}

// recordWriter appends plaintext to a scratch buffer as records, sealing
// each once it holds maxPlaintext bytes (finish seals the last one).
type recordWriter struct {
	b     []byte
	open  int // start of the record being filled; -1: none
	keys  *trafficKeys
	ctype byte
}

func (w *recordWriter) write(p []byte) {
	for len(p) > 0 {
		if w.open < 0 {
			w.open = len(w.b)
			w.b = append(w.b, 0, 0, 0, 0, 0)
		}
		n := min(len(p), maxPlaintext-(len(w.b)-w.open-recordHeaderLen))
		w.b = append(w.b, p[:n]...)
		p = p[n:]
		if len(w.b)-w.open-recordHeaderLen == maxPlaintext {
			w.finish()
		}
	}
}

func (w *recordWriter) finish() {
	if w.open >= 0 {
		w.b = w.keys.sealAt(w.b, w.open, w.ctype)
		w.open = -1
	}
}
