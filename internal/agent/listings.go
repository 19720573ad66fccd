package agent

import (
	"context"
	"sync"
	"time"

	"github.com/tideml/tide/internal/azureblob"
)

// maxListings bounds the blob folder listings a node remembers; the
// oldest is let go first.
const maxListings = 256

// listings remembers the node's latest listing of each blob folder, so a
// job that accepts a listing of a given age (api.AttributeCacheTTLVar)
// starts without asking the storage service again.
type listings struct {
	mu    sync.Mutex
	byURL map[string]listing
}

type listing struct {
	objs []azureblob.Object
	at   time.Time
}

// list gives the blobs under rel: the remembered listing when it is at
// most ttl old (ttl > 0), else a fresh one, remembered. age is how old
// the answer is (0 for a fresh one).
func (l *listings) list(ctx context.Context, st *azureblob.Store, rel string, ttl time.Duration) (objs []azureblob.Object, age time.Duration, err error) {
	key := st.URL(rel)
	now := time.Now()
	if ttl > 0 {
		l.mu.Lock()
		got, ok := l.byURL[key]
		l.mu.Unlock()
		if ok && now.Sub(got.at) <= ttl {
			return got.objs, now.Sub(got.at), nil
		}
	}
	if objs, err = st.List(ctx, rel); err != nil {
		return nil, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byURL == nil {
		l.byURL = map[string]listing{}
	}
	if _, ok := l.byURL[key]; !ok && len(l.byURL) >= maxListings {
		oldest := ""
		for k, v := range l.byURL {
			if oldest == "" || v.at.Before(l.byURL[oldest].at) {
				oldest = k
			}
		}
		delete(l.byURL, oldest)
	}
	l.byURL[key] = listing{objs: objs, at: now}
	return objs, 0, nil
}
