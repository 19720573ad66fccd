// Package store defines how tide keeps its state. Every backend (SQLite, the
// embedded default; PostgreSQL for production) implements Store and passes
// the conformance suite in storetest.
//
// Resources are stored as JSON documents with a few indexed columns. Every
// write bumps the resource's etag, and a write that names an expected etag
// fails with ErrPrecondition when the stored one differs, so API clients and
// concurrent server replicas cannot overwrite each other's changes.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
)

// Sentinel errors. Backends wrap them; callers test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrPrecondition = errors.New("etag does not match")
)

// NotFound returns an error wrapping ErrNotFound that names the resource.
func NotFound(kind, name string) error {
	return fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
}

// IsNotFound reports whether err means the resource does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Store is a transactional store. Update runs fn in a read-write transaction
// and commits when fn returns nil; View runs fn in a read-only one. A backend
// may run fn more than once (on a serialization conflict), so fn must not
// have effects outside the transaction.
type Store interface {
	Update(ctx context.Context, fn func(Tx) error) error
	View(ctx context.Context, fn func(Tx) error) error
	Close() error
}

// IfAbsent, as PutJob's ifMatch, creates the job only: when one of its name
// is stored, nothing is written and the error wraps ErrExists. A
// submission relies on it instead of reading the name first.
const IfAbsent = "<absent>"

// Tx is one transaction. Put methods create or replace; when ifMatch is not
// empty the stored etag must equal it (ErrPrecondition otherwise; ErrNotFound
// when nothing is stored). Put methods set the resource's Etag field to the
// new etag. Lists are ordered by name (jobs: by creation order).
type Tx interface {
	// OnCommit runs fn once the transaction has committed, never when it
	// rolls back; an attempt that a store retries registers again. Read
	// transactions (View) commit nothing and never run fn. It is how a
	// caller reports what a transaction did (metrics) exactly once.
	OnCommit(fn func())
	// Savepoint runs fn as a nested transaction of this one: when fn
	// returns an error, what it wrote is undone and the OnCommit functions
	// it registered are dropped, and the transaction goes on; fn's error
	// is returned. It is how one transaction holds several independent
	// requests (submissions written together), each of which may fail.
	// When the transaction itself cannot go on (the savepoint could not be
	// taken or rolled back, a conflict the store retries whole), the
	// error wraps ErrTxBroken and the caller must return it.
	Savepoint(ctx context.Context, fn func() error) error

	GetWorkspace(ctx context.Context, name string) (*api.Workspace, error)
	ListWorkspaces(ctx context.Context) ([]api.Workspace, error)
	PutWorkspace(ctx context.Context, w *api.Workspace) error

	GetCompute(ctx context.Context, workspace, name string) (*api.Compute, error)
	// ListComputes lists one workspace's computes, or every workspace's when
	// workspace is empty.
	ListComputes(ctx context.Context, workspace string) ([]api.Compute, error)
	// PutCompute writes a compute, a change ChangedComputes lists.
	PutCompute(ctx context.Context, c *api.Compute, ifMatch string) error
	DeleteCompute(ctx context.Context, workspace, name string) error
	// ComputeCursor returns a position in the stream of compute writes:
	// where a caller that has just listed the computes in this transaction
	// starts ChangedComputes.
	ComputeCursor(ctx context.Context) (string, error)
	// ChangedComputes lists the computes written after cursor (from
	// ComputeCursor or an earlier ChangedComputes) in ListComputes' order
	// (name, workspace), how many computes are stored in all, and the
	// cursor to pass next time. As with ChangedNodes, a write this
	// transaction does not see is listed by a later call, a compute may be
	// listed again unchanged, and deletions are not listed: a caller that
	// keeps every compute finds those when its computes, with the changed
	// ones, are more than the total.
	ChangedComputes(ctx context.Context, cursor string) ([]api.Compute, int, string, error)

	GetJob(ctx context.Context, workspace, name string) (*api.Job, error)
	ListJobs(ctx context.Context, f JobFilter) ([]api.Job, error)
	// CountJobs counts the jobs whose status is one of statuses, by
	// {workspace, compute, status}, without decoding them (what /metrics
	// reports).
	CountJobs(ctx context.Context, statuses []string) (map[[3]string]int, error)
	// ListJobDocs lists what ListJobs lists, in its order, with each job's
	// document as stored, undecoded: a caller that sends the jobs on as
	// JSON (the API's job list) neither decodes nor encodes them.
	ListJobDocs(ctx context.Context, f JobFilter) ([]JobDoc, error)
	// JobVersions lists the jobs f selects, in the order of ListJobs, by
	// key, etag, compute and priority only. A caller that keeps decoded jobs (the controller)
	// reads the documents of just the jobs whose etag changed, with
	// JobFilter.Keys, instead of decoding every job each time.
	JobVersions(ctx context.Context, f JobFilter) ([]JobVersion, error)
	// QueuePosition returns a queued job's place in its compute's queue
	// (1: the next to run): one more than the queued jobs of the same
	// workspace and compute ordered before it, by higher priority, then
	// earlier creation. It is 0 when the job is not queued or not stored.
	QueuePosition(ctx context.Context, workspace, name string) (int, error)
	// JobCursor returns a position in the stream of job writes: where a
	// caller that has just read the jobs in this transaction starts
	// ChangedJobs.
	JobCursor(ctx context.Context) (string, error)
	// ChangedJobs lists the jobs written after cursor (from JobCursor or
	// an earlier ChangedJobs), whatever their status, in creation order,
	// and the cursor to pass next time. A write this transaction does not
	// see yet is listed by a later call, never skipped; a job may be
	// listed again unchanged. This is how the controller follows the
	// queue at the cost of what changed, not of the queue's length.
	ChangedJobs(ctx context.Context, cursor string) ([]api.Job, string, error)
	// QueuedJobs counts the workspace's jobs in status Queued. The store
	// keeps the count as jobs change (triggers), so it costs one row however
	// long the queue: admission asks it on every submission.
	QueuedJobs(ctx context.Context, workspace string) (int, error)
	// PutJob writes j (as the Put methods do) and records events on it
	// (resource "job/NAME", as AddEvent does, in order), in one statement
	// where the store can: a job's change and the event that says so cost
	// one round trip, not two. Nothing is recorded when j is not written.
	PutJob(ctx context.Context, j *api.Job, ifMatch string, events ...*api.Event) error
	// PutJobs writes each job as PutJob(ctx, p.Job, "", p.Events...) does
	// (a new etag, set in the job; its events recorded), in a few
	// statements however many they are: a controller turn's placements
	// write a hundred jobs at once.
	PutJobs(ctx context.Context, puts []JobPut) error
	// SetPendingReasons sets the pending reason of each job in reasons
	// that is queued, in its stored document, without the caller reading
	// and writing the whole job: a job write as PutJob's (a new etag,
	// listed by ChangedJobs), in a few statements however many they are.
	// It returns how many it wrote: not a job that is gone, is not queued
	// or has that reason already.
	SetPendingReasons(ctx context.Context, reasons map[JobKey]string) (int, error)

	GetDatastore(ctx context.Context, workspace, name string) (*api.Datastore, error)
	ListDatastores(ctx context.Context, workspace string) ([]api.Datastore, error)
	PutDatastore(ctx context.Context, d *api.Datastore, ifMatch string) error
	DeleteDatastore(ctx context.Context, workspace, name string) error
	// GetEnvironment returns one version of an environment.
	GetEnvironment(ctx context.Context, workspace, name, version string) (*api.Environment, error)
	// ListEnvironments lists a workspace's environments, or the versions of
	// one name when name is not empty, by name and then creation order (so
	// the last version of a name is its latest).
	ListEnvironments(ctx context.Context, workspace, name string) ([]api.Environment, error)
	PutEnvironment(ctx context.Context, e *api.Environment, ifMatch string) error
	DeleteEnvironment(ctx context.Context, workspace, name, version string) error

	// GetComponent returns one version of a component.
	GetComponent(ctx context.Context, workspace, name, version string) (*api.Component, error)
	// ListComponents lists a workspace's components, or the versions of one
	// name when name is not empty, by name and then creation order (so the
	// last version of a name is its latest).
	ListComponents(ctx context.Context, workspace, name string) ([]api.Component, error)
	PutComponent(ctx context.Context, c *api.Component, ifMatch string) error
	DeleteComponent(ctx context.Context, workspace, name, version string) error

	// GetDataAsset returns one version of a data asset.
	GetDataAsset(ctx context.Context, workspace, name, version string) (*api.DataAsset, error)
	// ListDataAssets lists a workspace's data assets, or the versions of
	// one name (name not empty), by name and then in creation order.
	ListDataAssets(ctx context.Context, workspace, name string) ([]api.DataAsset, error)
	PutDataAsset(ctx context.Context, d *api.DataAsset, ifMatch string) error
	DeleteDataAsset(ctx context.Context, workspace, name, version string) error

	GetNode(ctx context.Context, id string) (*api.Node, error)
	// ListNodes lists the nodes of one compute, or all nodes when compute is empty.
	ListNodes(ctx context.Context, workspace, compute string) ([]api.Node, error)
	// PutNode writes a node's record, heartbeat fields (NodeBeat) included,
	// and is a change ChangedNodes lists.
	PutNode(ctx context.Context, n *api.Node) error
	// GetNodes returns the stored nodes among ids (the others are left
	// out), in id order, as GetNode returns each.
	GetNodes(ctx context.Context, ids []string) ([]api.Node, error)
	// PutNodes writes each node as PutNode does, in a few statements
	// however many they are. As ReleaseNode's, they may go with the
	// transaction's next statement, whose error is then theirs.
	PutNodes(ctx context.Context, ns []*api.Node) error
	DeleteNode(ctx context.Context, id string) error
	// ReleaseNode ends node id's run of assignment, in one statement and
	// without reading the node: when the node's job is assignment, its job
	// is cleared and, when it is Running, its state becomes state (since
	// now) and, when reason is not empty, its error reason. A node gone or
	// running something else is left alone. A write as PutNode's
	// (ChangedNodes lists it). A store may send it with the transaction's
	// next statement, whose error (or the commit's) is then its own: a
	// report frees its node and writes its job in one round trip.
	ReleaseNode(ctx context.Context, id, assignment, state, reason string, now time.Time) error
	// NodeCursor returns a position in the stream of node writes: where a
	// caller that has just listed the nodes in this transaction starts
	// ChangedNodes.
	NodeCursor(ctx context.Context) (string, error)
	// ChangedNodes lists the nodes written by PutNode after cursor (from
	// NodeCursor or an earlier ChangedNodes), in id order, how many nodes
	// are stored in all, and the cursor to pass next time. As with
	// ChangedJobs, a write this transaction does not see is listed by a
	// later call and a node may be listed again unchanged. Heartbeats
	// (PutNodeBeats) are not listed, and neither are deletions: a caller
	// that keeps every node finds those when its nodes, with the changed
	// ones, are more than the total.
	ChangedNodes(ctx context.Context, cursor string) ([]api.Node, int, string, error)
	// NodeBeats returns the job and heartbeat fields of each of the nodes
	// ids that exists, by ID, without decoding their records: one
	// statement for a batch of heartbeats.
	NodeBeats(ctx context.Context, ids []string) (map[string]NodeJobBeat, error)
	// PutNodeBeats writes the heartbeat fields alone of each node in
	// beats (by ID), in one statement: not a change ChangedNodes lists.
	// It returns ErrNotFound when one of them does not exist; the
	// transaction must then fail, others may have been written.
	PutNodeBeats(ctx context.Context, beats map[string]NodeBeat) error
	// NodesSeenBefore lists the nodes whose last heartbeat is before t,
	// with those that never sent one (LastSeen zero): what liveness
	// checks.
	NodesSeenBefore(ctx context.Context, t time.Time) ([]NodeSeen, error)
	// ComputeUtilizations sums, by compute ({workspace, name}), what its
	// nodes used at their last written heartbeat: the figures of a
	// compute sample, aggregated by the database instead of decoding
	// every node. A compute none of whose nodes reported utilization is
	// absent.
	ComputeUtilizations(ctx context.Context) (map[[2]string]ComputeUtilization, error)
	GetBudget(ctx context.Context, workspace, name string) (*api.Budget, error)
	ListBudgets(ctx context.Context, workspace string) ([]api.Budget, error)
	PutBudget(ctx context.Context, b *api.Budget, ifMatch string) error
	DeleteBudget(ctx context.Context, workspace, name string) error

	// AddComputeSample records a compute's state at s.Time (once per time).
	AddComputeSample(ctx context.Context, workspace, compute string, s api.ComputeSample) error
	// ListComputeSamples returns a compute's samples since a time, oldest first.
	ListComputeSamples(ctx context.Context, workspace, compute string, since time.Time) ([]api.ComputeSample, error)
	// PruneComputeSamples deletes the samples older than before.
	PruneComputeSamples(ctx context.Context, before time.Time) error

	// AddNodeUsage records the life of a removed node, for cost.
	AddNodeUsage(ctx context.Context, u NodeUsage) error
	// ListNodeUsage lists removed nodes of a workspace (of one compute when
	// compute is not empty) that ended after since, oldest first.
	ListNodeUsage(ctx context.Context, workspace, compute string, since time.Time) ([]NodeUsage, error)

	// AppendLog stores lines for a job, assigning each a Seq (dense per job,
	// from 1; the lines' Seq fields are updated). A line whose (Attempt, Node,
	// NodeSeq) is already stored is skipped, so an agent may resend a batch
	// after a reconnect.
	AppendLog(ctx context.Context, workspace, job string, lines []api.LogLine) error
	// ReadLog returns up to limit lines with Seq > after, in order.
	ReadLog(ctx context.Context, workspace, job string, after int64, limit int) ([]api.LogLine, error)

	// AddMetrics stores metric values a job logged. A value whose (Seq,
	// Name) is stored already is skipped, so a resent log batch stores it
	// once.
	AddMetrics(ctx context.Context, workspace, job string, ms []api.Metric) error
	// ListMetrics returns a job's metric values (of one name when name is
	// not empty) by Seq.
	ListMetrics(ctx context.Context, workspace, job, name string) ([]api.Metric, error)

	// AddEvent records an event on a resource ("compute/NAME" or "job/NAME") and sets its Seq.
	AddEvent(ctx context.Context, workspace, resource string, e *api.Event) error
	ListEvents(ctx context.Context, workspace, resource string, after int64, limit int) ([]api.Event, error)

	// GetToken returns the token record for a SHA-256 hash of a secret.
	GetToken(ctx context.Context, hash string) (*Token, error)
	PutToken(ctx context.Context, t *Token) error
	DeleteToken(ctx context.Context, hash string) error

	// ListTokens lists every stored token (hashes, never secrets).
	ListTokens(ctx context.Context) ([]Token, error)

	// Objects are small documents kept by kind and key (users, role
	// assignments, secrets). GetObject returns ErrNotFound when nothing is
	// kept; ListObjects lists a kind's documents whose key starts with
	// prefix, ordered by key.
	GetObject(ctx context.Context, kind, key string) ([]byte, error)
	PutObject(ctx context.Context, kind, key string, doc []byte) error
	DeleteObject(ctx context.Context, kind, key string) error
	ListObjects(ctx context.Context, kind, prefix string) ([][]byte, error)

	// AddAudit appends entries to the audit log, in order, and sets their
	// Seq, in one statement where the store can: the server writes a few
	// milliseconds of calls at once.
	AddAudit(ctx context.Context, es []api.AuditEntry) error
	// ListAudit lists audit entries, newest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]api.AuditEntry, error)

	// GetSetting and PutSetting keep small server-wide values (for example
	// that the admin token was created).
	GetSetting(ctx context.Context, key string) (string, error)
	PutSetting(ctx context.Context, key, value string) error
}

// JobFilter selects jobs. Empty fields match everything.
type JobFilter struct {
	Workspace string
	// Compute selects the jobs of a compute, with those of an attached
	// Kubernetes compute's (each on a hidden compute named
	// api.JobComputePrefix(Compute)...).
	Compute string
	// Serverless selects serverless jobs only: those whose hidden compute
	// is named api.ServerlessPrefix...
	Serverless bool
	Statuses   []string
	// Keys, when not empty, selects only these jobs.
	Keys []JobKey
	// Limit caps the number of jobs returned (0: no cap).
	Limit int
	// Newest lists the newest first (and Limit keeps the newest).
	Newest bool
}

// NodeUsage is the life of a node that was removed: from its creation to
// its removal, at its price per hour (dedicated or low-priority, the
// server's price for its size then).
type NodeUsage struct {
	Workspace, Compute, Node string
	Started, Ended           time.Time
	PricePerHour             float64
}

// JobPut is a job PutJobs writes and the events it records on it.
type JobPut struct {
	Job    *api.Job
	Events []*api.Event
}

// JobKey names a job.
type JobKey struct {
	Workspace, Name string
}

// JobVersion is a job's key and etag, with what orders the queue: its
// compute and priority (api.Job.Priority).
type JobVersion struct {
	JobKey
	Etag     string
	Compute  string
	Priority int
}

// JobDoc is a job as stored: its JSON object undecoded (Doc, without its
// etag), and the columns a list needs beside it (Priority is
// api.Job.Priority).
type JobDoc struct {
	Name, Compute, Status string
	Priority              int
	Etag                  string
	Doc                   []byte
}

// Token is an API credential of a user. Only a hash of the secret is
// stored.
type Token struct {
	Hash string `json:"hash"`
	// ID names the token in lists and revocations (a prefix of Hash).
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// User is the user the token signs in; empty in tokens made before
	// users existed, which belong to the bootstrap owner.
	User string `json:"user,omitempty"`
	// Role is "admin" in tokens made before users existed.
	Role     string    `json:"role,omitempty"`
	Created  time.Time `json:"created,omitzero"`
	Expires  time.Time `json:"expires,omitzero"`
	LastUsed time.Time `json:"last_used,omitzero"`
}

// AuditFilter selects audit entries. Empty fields match everything.
type AuditFilter struct {
	User  string
	Since time.Time
	// Limit caps the number of entries (0: no cap).
	Limit int
}

// ErrTxBroken marks an error of Tx.Savepoint that is the transaction's,
// not fn's alone: the transaction must be given up (and may be retried).
var ErrTxBroken = errors.New("the transaction cannot go on")

// ErrUnavailable means the store cannot be reached (a database restarting,
// a network failure). The request may succeed when retried.
var ErrUnavailable = errors.New("store unavailable")

// Cluster is implemented by stores that several server replicas share. It
// chooses the one replica that runs the controller and carries wake-ups
// between replicas; the store stays the only source of truth, so a lost
// wake-up costs latency, never correctness.
type Cluster interface {
	// Lead campaigns for leadership until ctx ends. Each time this replica
	// becomes the leader it calls fn with a context that ends when
	// leadership is lost (the database connection holding it failed), and
	// waits for fn to return before campaigning again.
	Lead(ctx context.Context, replica string, fn func(ctx context.Context)) error
	// Leader returns the name of the replica that leads, or "" if none does.
	Leader(ctx context.Context) (string, error)
	// Publish sends payload to every replica listening on topic, this one
	// included. Delivery is best effort.
	Publish(ctx context.Context, topic, payload string) error
	// Listen calls fn for each message on the topics until ctx ends,
	// reconnecting after failures; it calls fn("", "") after each
	// (re)connection, since messages may have been missed meanwhile.
	Listen(ctx context.Context, topics []string, fn func(topic, payload string)) error
}

// InSavepoint implements Tx.Savepoint for a SQL backend: exec runs one
// statement in the transaction and after holds its OnCommit functions.
// SQLite and PostgreSQL both nest savepoints of one name (ROLLBACK TO and
// RELEASE act on the innermost), and rolling back to one also ends the
// aborted state a failed statement leaves a PostgreSQL transaction in.
func InSavepoint(exec func(q string) error, after *[]func(), fn func() error) error {
	if err := exec(`SAVEPOINT tide_sp`); err != nil {
		return fmt.Errorf("%w: taking a savepoint: %w", ErrTxBroken, err)
	}
	n := len(*after)
	if err := fn(); err != nil {
		*after = (*after)[:n]
		if rerr := exec(`ROLLBACK TO SAVEPOINT tide_sp`); rerr != nil {
			return fmt.Errorf("%w: rolling back to a savepoint: %w", ErrTxBroken, rerr)
		}
		if rerr := exec(`RELEASE SAVEPOINT tide_sp`); rerr != nil {
			return fmt.Errorf("%w: releasing a savepoint: %w", ErrTxBroken, rerr)
		}
		return err
	}
	if err := exec(`RELEASE SAVEPOINT tide_sp`); err != nil {
		return fmt.Errorf("%w: releasing a savepoint: %w", ErrTxBroken, err)
	}
	return nil
}

// Rows is what the SQL backends' queries answer (*sql.Rows, pgx.Rows),
// for the scans both share.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanJobDocs reads the rows of ListJobDocs' columns (name, compute,
// status, priority, etag, doc) of a SQL backend.
func ScanJobDocs(rows Rows) ([]JobDoc, error) {
	var out []JobDoc
	for rows.Next() {
		var d JobDoc
		var etag int64
		if err := rows.Scan(&d.Name, &d.Compute, &d.Status, &d.Priority, &etag, &d.Doc); err != nil {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		d.Etag = strconv.FormatInt(etag, 10)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return out, nil
}

// ScanJobCounts reads both stores' answer to Tx.CountJobs: workspace,
// compute, status and the count.
func ScanJobCounts(rows Rows) (map[[3]string]int, error) {
	out := map[[3]string]int{}
	for rows.Next() {
		var k [3]string
		var n int
		if err := rows.Scan(&k[0], &k[1], &k[2], &n); err != nil {
			return nil, fmt.Errorf("counting jobs: %w", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting jobs: %w", err)
	}
	return out, nil
}
