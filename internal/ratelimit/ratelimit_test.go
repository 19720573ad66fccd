package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

func TestTake(t *testing.T) {
	var b Buckets
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	// A burst of 3, then one every 500 ms.
	for i := range 3 {
		if d := b.Take("ws", 2, 3, t0); d != 0 {
			t.Fatalf("take %d of the burst: wait %v", i, d)
		}
	}
	if d := b.Take("ws", 2, 3, t0); d != 500*time.Millisecond {
		t.Fatalf("beyond the burst: wait %v, want 500ms", d)
	}
	if d := b.Take("ws", 2, 3, t0.Add(200*time.Millisecond)); d != 300*time.Millisecond {
		t.Fatalf("200 ms later: wait %v, want 300ms", d)
	}
	if d := b.Take("ws", 2, 3, t0.Add(500*time.Millisecond)); d != 0 {
		t.Fatalf("500 ms later: wait %v, want a token", d)
	}
	// Another key has its own bucket.
	if d := b.Take("other", 2, 3, t0); d != 0 {
		t.Fatalf("other key: wait %v", d)
	}
	// A long quiet spell refills up to the burst only.
	late := t0.Add(time.Hour)
	for i := range 3 {
		if d := b.Take("ws", 2, 3, late); d != 0 {
			t.Fatalf("take %d after an hour: wait %v", i, d)
		}
	}
	if d := b.Take("ws", 2, 3, late); d == 0 {
		t.Fatal("the bucket held more than its burst")
	}
	// A clock that goes back takes nothing away and gives nothing.
	if d := b.Take("ws", 2, 3, t0); d == 0 {
		t.Fatal("a clock going back refilled the bucket")
	}
}

func TestPruneForgetsFullBuckets(t *testing.T) {
	var b Buckets
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for i := range pruneAbove {
		b.Take(strconv.Itoa(i), 1, 2, t0)
	}
	b.Take("busy", 1, 2, t0)
	b.Take("busy", 1, 2, t0)
	// Two seconds later every bucket is full again; busy takes a token
	// just before a new key comes, so busy's alone is not full.
	t1 := t0.Add(2 * time.Second)
	b.Take("busy", 1, 2, t1)
	b.Take("new", 1, 2, t1)
	if n := len(b.m); n != 2 {
		t.Fatalf("%d buckets after pruning, want busy and new", n)
	}
	if d := b.Take("busy", 1, 2, t1); d != 0 {
		t.Fatalf("busy kept a token: wait %v", d)
	}
	if d := b.Take("busy", 1, 2, t1); d == 0 {
		t.Fatal("busy's bucket was forgotten")
	}
}
