// Package tlsrec is the TLS 1.3 record layer of a connection held by the
// gateway's event loop (RFC 8446 §5), on byte slices. crypto/tls does the
// handshake (internal/gateway/tlsaccept.go); the traffic secrets it
// derives are taken over here (NewKeys), and from then on the loop
// decrypts what it reads in place in its shared buffer (State.ReadRecords)
// and the writer seals queued frames into a pooled scratch buffer
// (Writer, Scratch). An idle connection keeps its two AEAD states (under
// 2 KB) and nothing else: a record split over reads is kept only while it
// is incomplete (State.RPart), and the AEADs themselves are dropped after
// a sweep without use (Idle) and rebuilt from the keys.
//
// Only what a server needs after the handshake is handled: application
// data, alerts (any alert ends the connection), KeyUpdate and the
// compatibility ChangeCipherSpec (dropped, as crypto/tls does). The node
// sends no NewSessionTicket (tickets are disabled), and any other
// handshake message from the client is an error. A run of more than
// MaxUselessRecords records without application data (empty or
// padding-only ones, ChangeCipherSpec, KeyUpdate) ends the connection,
// as crypto/tls does. The node sends its own KeyUpdate after
// KeyUpdateAfter records under one key, well before the AEAD limits of
// RFC 8446 §5.5 (AES-GCM: 2^24.5 records).
package tlsrec

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

// Sizes of records (RFC 8446 §5.1, §5.2), and how much plaintext one
// write seals at most.
const (
	HeaderLen      = 5
	MaxPlaintext   = 1 << 14       // bytes of plaintext in a record
	MaxCiphertext  = 1<<14 + 256   // RFC 8446 §5.2
	recordOverhead = 1 + 16        // inner content type and AEAD tag
	SealBatch      = 4 * (1 << 14) // plaintext sealed per write (frames are never split across batches)

	// Content types of records.
	TypeAppData   = 23
	TypeAlert     = 21
	TypeHandshake = 22
	TypeCCS       = 20

	MaxUselessRecords = 16 // as crypto/tls's

	HandshakeKeyUpdate = 24 // the handshake message type of KeyUpdate
)

// Errors that end a connection's record stream.

var (
	ErrMAC          = errors.New("tls: record authentication failed")
	ErrOverflow     = errors.New("tls: record too large")
	ErrType         = errors.New("tls: unexpected record type")
	ErrNoType       = errors.New("tls: record without a content type")
	ErrCloseNotify  = errors.New("tls: close_notify from the peer")
	ErrHandshakeMsg = errors.New("tls: unexpected handshake message after the handshake")
	ErrUseless      = errors.New("tls: too many records without application data in a row")
	ErrCCS          = errors.New("tls: malformed ChangeCipherSpec")
)

// KeyUpdateAfter is the number of records the node seals under one key
// before it sends a KeyUpdate and moves to the next one (a variable for
// the tests).
var KeyUpdateAfter uint64 = 1 << 22

// Keys protect one direction: the key, its static IV, the record
// sequence number and the traffic secret (for KeyUpdate). The AEAD built
// from the key (its expanded AES key schedule and GHASH table: ~800 B)
// is kept while the direction is in use and dropped once it has been
// idle for a sweep (see State.Idle): an idle connection keeps its
// keys only, and rebuilding costs BenchmarkTLSKeysRebuild.
type Keys struct {
	aead      cipher.AEAD // nil: build it from key (aeadNow)
	used      bool        // sealed or opened since the last sweep
	suite     uint16
	keyLen    uint8
	secretLen uint8
	key       [32]byte
	iv        [12]byte
	Seq       uint64
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

// NewKeys derives a direction's key and IV from its traffic secret.
func NewKeys(suite uint16, secret []byte) (Keys, error) {
	k := Keys{suite: suite}
	return k, k.setSecret(secret)
}

func (k *Keys) setSecret(secret []byte) error {
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
	k.Seq, k.aead = 0, nil
	return nil
}

// AEAD is the direction's AEAD, built from the key if it was dropped.
func (k *Keys) AEAD() cipher.AEAD {
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

// Secret is the direction's current traffic secret (zero-padded).
func (k *Keys) Secret() [48]byte { return k.secret }

// HasAEAD reports whether the direction holds its built AEAD (Idle drops
// it after a sweep without use).
func (k *Keys) HasAEAD() bool { return k.aead != nil }

// Idle drops the AEAD if the direction was not used since the last call.
func (k *Keys) Idle() {
	if !k.used {
		k.aead = nil
	}
	k.used = false
}

// Update moves to the next traffic secret (RFC 8446 §7.2).
func (k *Keys) Update() error {
	h, _, err := suiteHash(k.suite)
	if err != nil {
		return err
	}
	return k.setSecret(expandLabel(h, k.secret[:k.secretLen], "traffic upd", int(k.secretLen)))
}

func (k *Keys) Nonce(out *[12]byte) []byte {
	*out = k.iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], k.Seq)
	for i := range s {
		out[4+i] ^= s[i]
	}
	return out[:]
}

// SealAt seals the record that starts at b[start:]: a 5-byte header
// (reserved, filled here) followed by the plaintext up to len(b). The
// ciphertext replaces the plaintext in place; b grows by the overhead.
func (k *Keys) SealAt(b []byte, start int, ctype byte) []byte {
	b = slices.Grow(b, recordOverhead)
	b = append(b, ctype)
	plain := b[start+HeaderLen:]
	hdr := b[start : start+HeaderLen]
	hdr[0], hdr[1], hdr[2] = TypeAppData, 3, 3
	binary.BigEndian.PutUint16(hdr[3:], uint16(len(plain)+16))
	var nb [12]byte
	out := k.AEAD().Seal(plain[:0], k.Nonce(&nb), plain, hdr)
	k.Seq++
	return b[:start+HeaderLen+len(out)]
}

// Seal appends plain to dst as records of at most MaxPlaintext bytes.
func (k *Keys) Seal(dst []byte, ctype byte, plain []byte) []byte {
	for first := true; first || len(plain) > 0; first = false {
		n := min(len(plain), MaxPlaintext)
		start := len(dst)
		dst = append(append(dst, 0, 0, 0, 0, 0), plain[:n]...)
		dst = k.SealAt(dst, start, ctype)
		plain = plain[n:]
	}
	return dst
}

// Open decrypts one whole record (header and body) in place and returns
// its inner content type and plaintext.
func (k *Keys) Open(rec []byte) (byte, []byte, error) {
	body := rec[HeaderLen:]
	if len(body) < 17 {
		return 0, nil, ErrMAC
	}
	var nb [12]byte
	plain, err := k.AEAD().Open(body[:0], k.Nonce(&nb), body, rec[:HeaderLen])
	if err != nil {
		return 0, nil, ErrMAC
	}
	k.Seq++
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i-- // padding
	}
	if i < 0 {
		return 0, nil, ErrNoType
	}
	if i > MaxPlaintext {
		return 0, nil, ErrOverflow
	}
	return plain[i], plain[:i], nil
}

// State is a loop-held TLS connection's record layer, under the connection's lock,
// but for rpart, which belongs to the reader (the loop).
type State struct {
	In  Keys
	Out Keys

	RPart     []byte // an incomplete record (reader only)
	useless   int    // records in a row without application data (reader only)
	KeyUpdate bool   // the client asked for a KeyUpdate, or KeyUpdateAfter: ours goes before the next record
}

// Idle drops the AEADs not used since the last sweep (under the connection's lock).
func (t *State) Idle() {
	t.In.Idle()
	t.Out.Idle()
}

// ReadResult is what a run of records asked for besides their data.
type ReadResult struct {
	WantKeyUpdate bool  // the client's KeyUpdate had update_requested
	Err           error // the connection must end (after the data before it)
}

// ReadRecords decrypts the whole records at the head of data in place.
// It returns their application data, moved to the front of data, and the
// incomplete record left at the end (a sub-slice of data). It stops at
// the first record that ends the connection (res.err).
func (t *State) ReadRecords(data []byte) (app, rest []byte, res ReadResult) {
	w, off := 0, 0 // end of the application data moved to the front; next record
	for {
		if len(data)-off < HeaderLen {
			return data[:w], data[off:], res
		}
		hdr := data[off : off+HeaderLen]
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if hdr[0] == TypeCCS {
			// A compatibility ChangeCipherSpec, in plaintext: dropped.
			if n != 1 {
				res.Err = ErrCCS
				return data[:w], nil, res
			}
			if len(data)-off < HeaderLen+1 {
				return data[:w], data[off:], res
			}
			if data[off+HeaderLen] != 1 {
				res.Err = ErrCCS
				return data[:w], nil, res
			}
			off += HeaderLen + 1
			if t.useless++; t.useless > MaxUselessRecords {
				res.Err = ErrUseless
				return data[:w], nil, res
			}
			continue
		}
		if hdr[0] != TypeAppData {
			res.Err = ErrType
			return data[:w], nil, res
		}
		if n > MaxCiphertext {
			res.Err = ErrOverflow
			return data[:w], nil, res
		}
		if len(data)-off < HeaderLen+n {
			return data[:w], data[off:], res
		}
		ctype, plain, err := t.In.Open(data[off : off+HeaderLen+n])
		off += HeaderLen + n
		if err != nil {
			res.Err = err
			return data[:w], nil, res
		}
		if ctype == TypeAppData && len(plain) > 0 {
			t.useless = 0
		} else if t.useless++; t.useless > MaxUselessRecords && ctype != TypeAlert {
			res.Err = ErrUseless
			return data[:w], nil, res
		}
		switch ctype {
		case TypeAppData:
			w += copy(data[w:], plain)
		case TypeAlert:
			if len(plain) == 2 && plain[1] == 0 {
				res.Err = ErrCloseNotify
			} else if len(plain) == 2 {
				res.Err = fmt.Errorf("tls: alert %d from the peer", plain[1])
			} else {
				res.Err = errors.New("tls: malformed alert")
			}
			return data[:w], nil, res
		case TypeHandshake:
			// Only a KeyUpdate may come, whole and last in its record
			// (a handshake message must not span a key change).
			if len(plain) != 5 || plain[0] != HandshakeKeyUpdate || plain[1] != 0 || plain[2] != 0 || plain[3] != 1 || plain[4] > 1 {
				res.Err = ErrHandshakeMsg
				return data[:w], nil, res
			}
			if err := t.In.Update(); err != nil {
				res.Err = err
				return data[:w], nil, res
			}
			if plain[4] == 1 {
				res.WantKeyUpdate = true
			}
		default:
			res.Err = ErrType
			return data[:w], nil, res
		}
	}
}

// KeyUpdateMsg is our KeyUpdate (update_not_requested).
var KeyUpdateMsg = []byte{HandshakeKeyUpdate, 0, 0, 1, 0}

// CloseNotifyAlert is a warning-level close_notify.
var CloseNotifyAlert = []byte{1, 0}

// Scratch is a writer's buffer for sealed records, borrowed from a
// pool for one write: a connection keeps none.
var Scratch = sync.Pool{New: func() any {
	b := make([]byte, 0, SealBatch+4*(HeaderLen+recordOverhead))
	return &b
}}

// Writer appends plaintext to a scratch buffer as records, sealing
// each once it holds MaxPlaintext bytes (Finish seals the last one).
type Writer struct {
	B    []byte
	open int // start of the record being filled; -1: none
	Keys *Keys
	Type byte
}

// NewWriter is a Writer appending to b, sealing with keys records of
// type ctype (Type may change between records).
func NewWriter(b []byte, keys *Keys, ctype byte) Writer {
	return Writer{B: b, open: -1, Keys: keys, Type: ctype}
}

func (w *Writer) Write(p []byte) {
	for len(p) > 0 {
		if w.open < 0 {
			w.open = len(w.B)
			w.B = append(w.B, 0, 0, 0, 0, 0)
		}
		n := min(len(p), MaxPlaintext-(len(w.B)-w.open-HeaderLen))
		w.B = append(w.B, p[:n]...)
		p = p[n:]
		if len(w.B)-w.open-HeaderLen == MaxPlaintext {
			w.Finish()
		}
	}
}

func (w *Writer) Finish() {
	if w.open >= 0 {
		w.B = w.Keys.SealAt(w.B, w.open, w.Type)
		w.open = -1
	}
}
