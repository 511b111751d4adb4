package bench

import (
	"math/rand/v2"
	"testing"
)

func TestSeqSetInOrder(t *testing.T) {
	var s seqSet
	for i := range uint64(10000) {
		if isNew, ok := s.add(i); !isNew || !ok {
			t.Fatalf("add(%d) = %v, %v", i, isNew, ok)
		}
	}
	if s.n != 10000 || s.base != 9984 || len(s.bits) > 1 {
		t.Fatalf("n %d base %d window %d words", s.n, s.base, len(s.bits))
	}
	for _, i := range []uint64{0, 5000, 9999} {
		if isNew, _ := s.add(i); isNew || !s.has(i) {
			t.Fatalf("duplicate %d accepted", i)
		}
	}
	if s.has(10000) {
		t.Fatal("has an index never added")
	}
}

func TestSeqSetMatchesMap(t *testing.T) {
	var s seqSet
	seen := map[uint64]bool{}
	// Nearly ordered deliveries with repeats and holes, like a resume.
	for i := range 20000 {
		v := uint64(i) + uint64(rand.IntN(300))
		if rand.IntN(10) == 0 {
			v = uint64(rand.IntN(i + 1))
		}
		isNew, ok := s.add(v)
		if !ok {
			t.Fatalf("index %d refused", v)
		}
		if isNew == seen[v] {
			t.Fatalf("add(%d) new=%v, map says seen=%v", v, isNew, seen[v])
		}
		seen[v] = true
	}
	if s.n != uint64(len(seen)) {
		t.Fatalf("n %d, map %d", s.n, len(seen))
	}
	for v := range uint64(20400) {
		if s.has(v) != seen[v] {
			t.Fatalf("has(%d) = %v, map %v", v, s.has(v), seen[v])
		}
	}
}

func TestSeqSetFarAhead(t *testing.T) {
	var s seqSet
	if _, ok := s.add(64 * maxWindowWords); ok {
		t.Fatal("an index 64 Mi ahead was tracked")
	}
	if isNew, ok := s.add(64*maxWindowWords - 1); !isNew || !ok {
		t.Fatal("the last trackable index was refused")
	}
}

func TestSeqSetAddDoesNotAllocateOnceGrown(t *testing.T) {
	var s seqSet
	for i := range uint64(200) {
		s.add(i)
	}
	i := uint64(200)
	if n := testing.AllocsPerRun(1000, func() { s.add(i); i++ }); n != 0 {
		t.Fatalf("add allocates %v times", n)
	}
}
