package bench

// seqSet is the set of message indices one connection received from its
// stream: every index below base, plus a bit window above it. Deliveries
// come nearly in order, so the window stays a few words long whatever the
// number of messages, and adding is allocation-free once it has grown.
// A seqSet belongs to one goroutine.
type seqSet struct {
	base uint64   // every index < base is in the set; a multiple of 64
	bits []uint64 // bit j of word w: index base+64w+j
	n    uint64   // distinct indices
	// inline holds a window of up to two words (the usual case) inside
	// the set itself: no allocation, and no cache miss of its own when a
	// broadcast visits thousands of sets. A seqSet must not be copied
	// once used.
	inline [2]uint64
}

// maxWindowWords bounds the window (64 Mi indices ahead of the oldest
// missing one); indices further ahead are refused as implausible.
const maxWindowWords = 1 << 20

// add inserts i and reports whether it was new; ok is false when i is too
// far ahead of the oldest missing index to be tracked.
func (s *seqSet) add(i uint64) (isNew, ok bool) {
	if i < s.base {
		return false, true
	}
	off := i - s.base
	w := off / 64
	if w >= maxWindowWords {
		return false, false
	}
	if int(w) >= len(s.bits) {
		s.grow(int(w) + 1)
	}
	m := uint64(1) << (off % 64)
	if s.bits[w]&m != 0 {
		return false, true
	}
	s.bits[w] |= m
	s.n++
	if w == 0 {
		s.compact()
	}
	return true, true
}

// has reports whether i is in the set.
func (s *seqSet) has(i uint64) bool {
	if i < s.base {
		return true
	}
	off := i - s.base
	w := off / 64
	return w < uint64(len(s.bits)) && s.bits[w]&(1<<(off%64)) != 0
}

// grow makes the window at least n words long, reusing the array.
func (s *seqSet) grow(n int) {
	if n <= cap(s.bits) {
		s.bits = s.bits[:n]
		return
	}
	if s.bits == nil && n <= len(s.inline) {
		s.bits = s.inline[:n]
		return
	}
	nb := make([]uint64, n, max(n, 2*cap(s.bits), 4))
	copy(nb, s.bits)
	s.bits = nb
}

// compact moves base past the full words at the front of the window.
func (s *seqSet) compact() {
	k := 0
	for k < len(s.bits) && s.bits[k] == ^uint64(0) {
		k++
	}
	if k == 0 {
		return
	}
	s.base += 64 * uint64(k)
	n := copy(s.bits, s.bits[k:])
	clear(s.bits[n:])
	s.bits = s.bits[:n]
}
