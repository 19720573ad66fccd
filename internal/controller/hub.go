package controller

import "sync"

// Message is what the server pushes to an agent: an "assign" with an
// api.Assignment, or a "cancel" with an api.Cancel. KindSync, from another
// replica, asks the agent's stream to send what the store holds for it.
type Message struct {
	Kind string
	Data any
}

// KindSync is a Message that carries no data: the stream reads what is
// pending for its node from the store and sends that.
const KindSync = "sync"

// Hub holds the agents' live connections. The controller pushes to it the
// moment it decides; the store stays the source of truth, so a message to an
// agent that is not connected is dropped and sent again when it connects.
type Hub struct {
	// Relay, when set, is called for a message to a node whose agent is not
	// connected here: with several replicas it may be connected to another.
	Relay func(node string)
	// Sent, when set, is called for every message to a node, delivered
	// here or not (service.Service.Recheck).
	Sent func(node string)

	mu   sync.Mutex
	subs map[string]chan Message
	// missed marks the connections a message was dropped for because
	// they were full (a slow agent): see Missed.
	missed map[chan Message]bool
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: map[string]chan Message{}, missed: map[chan Message]bool{}} }

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
	delete(h.missed, ch)
	h.mu.Unlock()
}

// Connected reports whether a node's agent holds a connection.
func (h *Hub) Connected(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.subs[node]
	return ok
}

// Push sends a message to a node's agent: directly if it is connected
// here, else through Relay. It never blocks.
func (h *Hub) Push(node string, m Message) {
	if !h.Deliver(node, m) && h.Relay != nil {
		h.Relay(node)
	}
}

// Deliver sends a message to a node's agent if it is connected here. It
// never blocks, so a slow or stuck agent cannot hold up the controller: a
// full channel drops the message and marks the connection (Missed), and
// its stream sends what the store holds once it has caught up.
func (h *Hub) Deliver(node string, m Message) bool {
	if h.Sent != nil {
		h.Sent(node)
	}
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
	}
	h.mu.Lock()
	if h.subs[node] == ch {
		h.missed[ch] = true
	}
	h.mu.Unlock()
	// The stream may have emptied the channel meanwhile, and checked for
	// missed messages before the mark: wake it.
	select {
	case ch <- Message{Kind: KindSync}:
	default:
	}
	return false
}

// Missed reports whether a message to connection ch was dropped since the
// last call, and forgets it. A stream calls it once it has sent what its
// channel held; true means it must send what the store holds for its node.
func (h *Hub) Missed(ch chan Message) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.missed[ch]
	delete(h.missed, ch)
	return m
}

// DeliverAll sends a message to every agent connected here.
func (h *Hub) DeliverAll(m Message) {
	h.mu.Lock()
	nodes := make([]string, 0, len(h.subs))
	for n := range h.subs {
		nodes = append(nodes, n)
	}
	h.mu.Unlock()
	for _, n := range nodes {
		h.Deliver(n, m)
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
