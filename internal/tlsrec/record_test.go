package tlsrec

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"testing"
)

var testSuites = []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256}

// keyPair is a writer's and a reader's keys for the same secret.
func keyPair(t testing.TB, suite uint16) (w, r Keys) {
	secret := bytes.Repeat([]byte{7}, 32)
	if suite == tls.TLS_AES_256_GCM_SHA384 {
		secret = bytes.Repeat([]byte{7}, 48)
	}
	w, err := NewKeys(suite, secret)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = NewKeys(suite, secret)
	return w, r
}

// feed is consumeTLS's handling of the partial record, for a stream cut
// into chunks: the application data, or the error that ended it.
func feed(t *State, stream []byte, chunk int) ([]byte, error) {
	var out []byte
	for len(stream) > 0 {
		k := min(chunk, len(stream))
		data := append([]byte(nil), stream[:k]...) // the loop's buffer
		stream = stream[k:]
		if len(t.RPart) > 0 {
			t.RPart = append(t.RPart, data...)
			data = t.RPart
		}
		app, rest, res := t.ReadRecords(data)
		out = append(out, app...)
		t.RPart = append([]byte(nil), rest...)
		if res.WantKeyUpdate {
			t.KeyUpdate = true
		}
		if res.Err != nil {
			return out, res.Err
		}
	}
	if len(t.RPart) > 0 {
		return out, io.ErrUnexpectedEOF
	}
	return out, nil
}

func TestTLSRecordRoundTrip(t *testing.T) {
	for _, suite := range testSuites {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) {
			w, r := keyPair(t, suite)
			for _, size := range []int{0, 1, 100, MaxPlaintext - 1, MaxPlaintext, MaxPlaintext + 1, 50000} {
				plain := bytes.Repeat([]byte{'x'}, size)
				rw := NewWriter(nil, &w, TypeAppData)
				rw.Write(plain[:size/2])
				rw.Write(plain[size/2:])
				rw.Finish()
				st := &State{In: r}
				for _, chunk := range []int{1, 5, 6, 1000, 1 << 20} {
					st.In.Seq = r.Seq
					got, err := feed(st, rw.B, chunk)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("size %d chunk %d: %d bytes back, err %v", size, chunk, len(got), err)
					}
				}
				r.Seq = st.In.Seq
				if w.Seq != r.Seq {
					t.Fatalf("size %d: writer at seq %d, reader at %d", size, w.Seq, r.Seq)
				}
			}
		})
	}
}

func TestTLSRecordKeyUpdate(t *testing.T) {
	for _, suite := range testSuites {
		w, r := keyPair(t, suite)
		var stream []byte
		stream = w.Seal(stream, TypeAppData, []byte("before"))
		stream = w.Seal(stream, TypeHandshake, []byte{HandshakeKeyUpdate, 0, 0, 1, 1})
		if err := w.Update(); err != nil {
			t.Fatal(err)
		}
		stream = w.Seal(stream, TypeAppData, []byte(" after"))
		st := &State{In: r}
		got, err := feed(st, stream, 3)
		if err != nil || string(got) != "before after" || !st.KeyUpdate || st.In.Seq != 1 {
			t.Fatalf("%s: %q err %v update requested %v seq %d", tls.CipherSuiteName(suite), got, err, st.KeyUpdate, st.In.Seq)
		}
	}
}

// ChangeCipherSpec records are dropped wherever they come, also cut over
// reads; a run of more than maxUselessRecords records without data (CCS,
// empty, padding only) ends the stream, a shorter one does not.
func TestTLSRecordCCSAndUselessRuns(t *testing.T) {
	ccs := []byte{TypeCCS, 3, 3, 0, 1, 1}
	w, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
	var stream []byte
	stream = append(stream, ccs...)
	stream = w.Seal(stream, TypeAppData, []byte("a"))
	for i := 0; i < MaxUselessRecords; i++ {
		switch i % 3 {
		case 0:
			stream = append(stream, ccs...)
		case 1:
			stream = w.Seal(stream, TypeAppData, nil)
		default:
			stream = w.Seal(stream, TypeHandshake, []byte{HandshakeKeyUpdate, 0, 0, 1, 0})
			if err := w.Update(); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream = w.Seal(stream, TypeAppData, []byte("b"))
	for _, chunk := range []int{1, 2, 5, 7, 1 << 20} {
		st := &State{In: r}
		got, err := feed(st, stream, chunk)
		if err != nil || string(got) != "ab" {
			t.Fatalf("chunk %d: %q err %v", chunk, got, err)
		}
	}
	long := append([]byte(nil), stream[:len(stream)-(HeaderLen+1+1+16)]...) // without "b"
	long = append(long, ccs...)
	st := &State{In: r}
	if got, err := feed(st, long, 3); err != ErrUseless || string(got) != "a" {
		t.Fatalf("a run of %d: %q err %v", MaxUselessRecords+1, got, err)
	}
	for _, bad := range [][]byte{{TypeCCS, 3, 3, 0, 1, 2}, {TypeCCS, 3, 3, 0, 2, 1, 1}} {
		if _, err := feed(&State{In: r}, bad, 1); err != ErrCCS {
			t.Fatalf("%x: err %v, want %v", bad, err, ErrCCS)
		}
	}
}

func TestTLSRecordRefusals(t *testing.T) {
	cases := map[string]struct {
		rec  func(w *Keys) []byte
		want error
	}{
		"flipped": {func(w *Keys) []byte {
			r := w.Seal(nil, TypeAppData, []byte("hello"))
			r[len(r)-1] ^= 1
			return r
		}, ErrMAC},
		"replayed": {func(w *Keys) []byte {
			r := w.Seal(nil, TypeAppData, []byte("hello"))
			return append(r, r...)
		}, ErrMAC},
		"short body":    {func(*Keys) []byte { return []byte{TypeAppData, 3, 3, 0, 3, 1, 2, 3} }, ErrMAC},
		"plain type":    {func(*Keys) []byte { return []byte{TypeHandshake, 3, 3, 0, 0} }, ErrType},
		"too long":      {func(*Keys) []byte { return []byte{TypeAppData, 3, 3, 0x41, 0x01} }, ErrOverflow},
		"no type":       {func(w *Keys) []byte { return w.Seal(nil, 0, nil) }, ErrNoType},
		"close_notify":  {func(w *Keys) []byte { return w.Seal(nil, TypeAlert, CloseNotifyAlert) }, ErrCloseNotify},
		"ticket":        {func(w *Keys) []byte { return w.Seal(nil, TypeHandshake, []byte{4, 0, 0, 1, 0}) }, ErrHandshakeMsg},
		"bad keyupdate": {func(w *Keys) []byte { return w.Seal(nil, TypeHandshake, []byte{HandshakeKeyUpdate, 0, 0, 1, 2}) }, ErrHandshakeMsg},
		"ccs":           {func(w *Keys) []byte { return w.Seal(nil, 20, []byte{1}) }, ErrType},
	}
	for name, tc := range cases {
		w, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
		st := &State{In: r}
		_, err := feed(st, tc.rec(&w), 4)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", name, err, tc.want)
		}
	}
}

// FuzzTLSRecords feeds the record layer arbitrary bytes (it must refuse
// them without a panic, and never return more than it was given) and
// round-trips the input as plaintext, cut into chunks of the first byte.
func FuzzTLSRecords(f *testing.F) {
	w, _ := keyPair(f, tls.TLS_AES_128_GCM_SHA256)
	f.Add(w.Seal(nil, TypeAppData, []byte("\x81\x85abcdehello")))
	f.Add(w.Seal(nil, TypeHandshake, []byte{HandshakeKeyUpdate, 0, 0, 1, 1}))
	f.Add(w.Seal(nil, TypeAlert, CloseNotifyAlert))
	f.Add([]byte{TypeAppData, 3, 3, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
		st := &State{In: r}
		in := append([]byte(nil), data...)
		app, rest, _ := st.ReadRecords(in)
		if len(app)+len(rest) > len(data) {
			t.Fatalf("%d bytes of data and %d left from %d", len(app), len(rest), len(data))
		}
		if len(rest) > 0 && !bytes.Equal(rest, data[len(data)-len(rest):]) {
			t.Fatal("the rest is not the end of the input")
		}
		// Round trip.
		w, r := keyPair(t, tls.TLS_CHACHA20_POLY1305_SHA256)
		chunk := 1
		if len(data) > 0 {
			chunk += int(data[0])
		}
		rw := NewWriter(nil, &w, TypeAppData)
		rw.Write(data)
		rw.Finish()
		got, err := feed(&State{In: r}, rw.B, chunk)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip of %d bytes in chunks of %d: %d back, err %v", len(data), chunk, len(got), err)
		}
	})
}

func BenchmarkTLSRecord(b *testing.B) {
	for _, size := range []int{100, 2048} {
		frame := bytes.Repeat([]byte{'m'}, size)
		b.Run(fmt.Sprintf("seal/%dB", size), func(b *testing.B) {
			w, _ := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
			buf := make([]byte, 0, size+64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				rw := NewWriter(buf[:0], &w, TypeAppData)
				rw.Write(frame)
				rw.Finish()
			}
		})
		b.Run(fmt.Sprintf("open/%dB", size), func(b *testing.B) {
			w, r := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
			recs := make([][]byte, 1024)
			for i := range recs {
				recs[i] = w.Seal(nil, TypeAppData, frame)
			}
			buf := make([]byte, len(recs[0]))
			st := &State{In: r}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i == len(recs) {
					b.StopTimer()
					w, r = keyPair(b, tls.TLS_AES_128_GCM_SHA256)
					for j := range recs {
						recs[j] = w.Seal(nil, TypeAppData, frame)
					}
					st.In, i = r, 0
					b.StartTimer()
				}
				copy(buf, recs[i])
				i++
				if app, _, res := st.ReadRecords(buf); res.Err != nil || len(app) != size {
					b.Fatal(res.Err)
				}
			}
		})
	}
}

// BenchmarkTLSKeysRebuild is the cost of a direction's first record
// after it was idle for a sweep: the AEAD is built again from the key.
func BenchmarkTLSKeysRebuild(b *testing.B) {
	frame := bytes.Repeat([]byte{'m'}, 100)
	w, _ := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		w.Idle()
		w.Idle() // the second drops the AEAD
		w.Seal(buf[:0], TypeAppData, frame)
	}
}
