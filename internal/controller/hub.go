package controller

import "sync"

// Message is what the server pushes to an agent: an "assign" with an
// api.Assignment, or a "cancel" with an api.Cancel.
type Message struct {
	Kind string
	Data any
}

// Hub holds the agents' live connections. The controller pushes to it the
// moment it decides; the store stays the source of truth, so a message to an
// agent that is not connected is dropped and sent again when it connects.
type Hub struct {
	mu   sync.Mutex
	subs map[string]chan Message
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: map[string]chan Message{}} }

// Subscribe registers a node's connection, replacing an older one.
func (h *Hub) Subscribe(node string) chan Message {
	ch := make(chan Message, 16)
	h.mu.Lock()
	h.subs[node] = ch
	h.mu.Unlock()
	return ch
}

// Unsubscribe removes a node's connection if it is still ch.
func (h *Hub) Unsubscribe(node string, ch chan Message) {
	h.mu.Lock()
	if h.subs[node] == ch {
		delete(h.subs, node)
	}
	h.mu.Unlock()
}

// Connected reports whether a node's agent holds a connection.
func (h *Hub) Connected(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.subs[node]
	return ok
}

// Push sends a message to a node's agent if it is connected. It never
// blocks: a full channel means a stuck connection, which the agent's
// reconnect will repair from the store.
func (h *Hub) Push(node string, m Message) bool {
	h.mu.Lock()
	ch, ok := h.subs[node]
	h.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case ch <- m:
		return true
	default:
		return false
	}
}

// Broadcast wakes everyone waiting for a change (log lines, job statuses).
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// NewBroadcast returns a broadcast.
func NewBroadcast() *Broadcast { return &Broadcast{ch: make(chan struct{})} }

// Wait returns a channel closed at the next Notify.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Notify wakes every waiter.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
