// Package ratelimit keeps a token bucket per key (the server keys them by
// workspace), so each key may make a burst of requests and then a steady
// rate, and a refused caller learns how long to wait. Buckets live in
// memory: each replica of a server limits the requests it serves.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// pruneAbove is the number of buckets above which Take forgets full ones
// (a full bucket is the same as none), so keys that come and go do not
// grow the map without end.
const pruneAbove = 10_000

// Buckets are token buckets by key. The zero value is ready; it is safe
// for concurrent use.
type Buckets struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// Take takes one token from key's bucket, which holds up to burst tokens
// and gains rate tokens per second, at time now. It returns 0 when a token
// was taken, else how long until the next one (nothing is taken then).
func (b *Buckets) Take(key string, rate float64, burst int, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*bucket{}
	}
	k, ok := b.m[key]
	if !ok {
		if len(b.m) >= pruneAbove {
			b.prune(rate, burst, now)
		}
		k = &bucket{tokens: float64(burst), at: now}
		b.m[key] = k
	}
	k.refill(rate, burst, now)
	if k.tokens >= 1 {
		k.tokens--
		return 0
	}
	return time.Duration(math.Ceil((1 - k.tokens) / rate * float64(time.Second)))
}

func (k *bucket) refill(rate float64, burst int, now time.Time) {
	if d := now.Sub(k.at); d > 0 {
		k.tokens = min(float64(burst), k.tokens+d.Seconds()*rate)
		k.at = now
	}
}

// prune forgets the buckets that would be full at now, judged with the
// limits of the key being added (keys with other limits are refilled
// again when they come back, so at worst one is forgotten early).
func (b *Buckets) prune(rate float64, burst int, now time.Time) {
	for key, k := range b.m {
		if k.tokens+now.Sub(k.at).Seconds()*rate >= float64(burst) {
			delete(b.m, key)
		}
	}
}
