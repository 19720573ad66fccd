package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/server"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/tidetest"
)

// TestTeamSession scripts a team's session: an admin makes a user and an
// identity, gives them roles, sets a secret; the user submits a job on a
// compute with that identity; the job reads the secret, and with its
// identity token submits a child job; the token dies with the attempt.
// The secret's value must appear nowhere (log, job, events, secrets list,
// audit log), every mutating call must be in the audit log, and roles must
// hold (a Data Scientist cannot cancel someone else's job; a user with no
// role sees nothing).
func TestTeamSession(t *testing.T) {
	in, dir := newServer(t)
	ctx := context.Background()
	admin := in.client
	const secretValue = "s3cr3t-VALUE-42"

	mkUser := func(name string) *api.Client {
		nu, err := admin.CreateUser(ctx, api.User{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := api.NewClient(in.cfg.AdvertiseURL, nu.Token.Secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ana, bob := mkUser("ana"), mkUser("bob")
	if _, err := admin.CreateUser(ctx, api.User{Name: "bot", Kind: api.PrincipalIdentity}); err != nil {
		t.Fatal(err)
	}
	for who, role := range map[string]string{"ana": "AzureML Data Scientist", "bot": "Data Scientist"} {
		if _, err := admin.AssignRole(ctx, "default", who, role); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.SetSecret(ctx, "default", "api-key", secretValue); err != nil {
		t.Fatal(err)
	}
	// A compute naming an identity that does not exist is refused.
	bad, _ := spec.ParseCompute("c.yml", []byte("name: nobody\ntype: amlcompute\nidentity: {type: user_assigned, user_assigned_identities: [{resource_id: ghost}]}\n"), nil)
	if _, _, err := admin.PutCompute(ctx, "default", bad); err == nil || !strings.Contains(err.Error(), "tide identity create ghost") {
		t.Errorf("compute with a missing identity: %v", err)
	}
	createCompute(t, in, "name: ident\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\nidle_time_before_scale_down: 60\n"+
		"identity:\n  type: user_assigned\n  user_assigned_identities:\n  - resource_id: /subscriptions/s/resourceGroups/g/providers/Microsoft.ManagedIdentity/userAssignedIdentities/bot\n")

	// A job naming a secret that does not exist is refused at submit.
	j, _ := spec.ParseJob("job.yml", []byte("command: echo hi\ncompute: ident\nenvironment_variables: {K: '${{secrets.nope}}'}\n"), nil)
	if _, err := ana.CreateJob(ctx, "default", j); err == nil || !strings.Contains(err.Error(), `secret "nope" does not exist`) {
		t.Errorf("job with a missing secret: %v", err)
	}

	tokFile := filepath.Join(tidetest.SharedDir(t), "identity-token")
	parent, _ := spec.ParseJob("job.yml", []byte(fmt.Sprintf(`command: |
  echo "key=$KEY"
  echo "$TIDE_IDENTITY_TOKEN" > %s
  %s whoami
  printf 'command: echo child-ran\ncompute: ident\n' > child.yml
  %s job create -f child.yml --name child-1
compute: ident
environment_variables:
  KEY: ${{secrets.api-key}}
`, tokFile, tideBin, tideBin)), nil)
	pj, err := ana.CreateJob(ctx, "default", parent)
	if err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, in, pj.Name, 90*time.Second)
	log := logText(t, in, pj.Name)
	if done.Status != api.JobCompleted {
		t.Fatalf("parent job %s (%s):\n%s", done.Status, done.Error, log)
	}
	if done.CreatedBy != "ana" {
		t.Errorf("parent created_by = %q, want ana", done.CreatedBy)
	}
	if !strings.Contains(log, "key=***") || !strings.Contains(log, "user:") || !strings.Contains(log, "bot") {
		t.Errorf("the job's log lacks the masked secret or its identity:\n%s", log)
	}
	child := waitJob(t, in, "child-1", 90*time.Second)
	if child.Status != api.JobCompleted || child.CreatedBy != "bot" {
		t.Errorf("child job: %s by %q (%s)", child.Status, child.CreatedBy, child.Error)
	}

	// The identity token died with the attempt.
	tok, err := os.ReadFile(tokFile)
	if err != nil || !strings.HasPrefix(string(tok), "idt.") {
		t.Fatalf("identity token file: %q, %v", tok, err)
	}
	dead, _ := api.NewClient(in.cfg.AdvertiseURL, strings.TrimSpace(string(tok)), nil)
	if _, err := dead.Jobs(ctx, "default", api.JobFilter{}); !isStatus(err, 401) || !strings.Contains(err.Error(), "no longer running") {
		t.Errorf("identity token after its attempt ended: %v", err)
	}

	// Roles: a Data Scientist cancels only its own jobs; no role, nothing.
	long, _ := spec.ParseJob("job.yml", []byte("command: sleep 60\ncompute: ident\n"), nil)
	lj, err := admin.CreateJob(ctx, "default", long)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ana.CancelJob(ctx, "default", lj.Name); !isStatus(err, 403) || !strings.Contains(err.Error(), "Contributor") {
		t.Errorf("ana canceling admin's job: %v", err)
	}
	if _, err := admin.CancelJob(ctx, "default", lj.Name); err != nil {
		t.Error(err)
	}
	if _, err := bob.Jobs(ctx, "default", api.JobFilter{}); !isStatus(err, 403) {
		t.Errorf("bob (no role) listing jobs: %v", err)
	}
	if ws, err := bob.Workspaces(ctx); err != nil || len(ws) != 0 {
		t.Errorf("bob's workspaces = %v, %v; want none", ws, err)
	}
	if _, _, err := ana.PutCompute(ctx, "default", bad); !isStatus(err, 403) || !strings.Contains(err.Error(), "AzureML Compute Operator") {
		t.Errorf("ana creating a compute: %v", err)
	}

	// The secret's value is nowhere a user can read.
	var seen []string
	add := func(what string, v any, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := json.Marshal(v)
		seen = append(seen, what+": "+string(b))
	}
	jv, err := admin.Job(ctx, "default", pj.Name)
	add("job show", jv, err)
	ev, err := admin.JobEvents(ctx, "default", pj.Name)
	add("job events", ev, err)
	ss, err := admin.Secrets(ctx, "default")
	add("secret list", ss, err)
	au, err := admin.Audit(ctx, "", "", 0)
	add("audit list", au, err)
	lines, err := admin.Logs(ctx, "default", pj.Name, 0)
	add("job logs", lines, err)
	for _, s := range seen {
		if strings.Contains(s, secretValue) {
			t.Errorf("the secret's value shows in %s", s)
		}
	}
	// Nor in the database: it is kept encrypted (the key in secrets.key).
	dbFiles, _ := filepath.Glob(filepath.Join(dir, "tide.db*"))
	for _, f := range dbFiles {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), secretValue) {
			t.Errorf("the secret's value is stored in clear in %s", f)
		}
	}
	// The audit log has the session's mutating calls, by whom.
	want := map[string]bool{"admin POST /v1/users": false, "admin POST /v1/workspaces/default/roles": false,
		"admin PUT /v1/workspaces/default/secrets/api-key": false, "ana POST /v1/workspaces/default/jobs": false,
		"bot POST /v1/workspaces/default/jobs": false, "ana POST /v1/workspaces/default/jobs/" + lj.Name + "/cancel": false}
	for _, e := range au {
		k := e.User + " " + e.Method + " " + e.Path
		if _, ok := want[k]; ok {
			want[k] = true
		}
		if k == "ana POST /v1/workspaces/default/jobs/"+lj.Name+"/cancel" && e.Status != 403 {
			t.Errorf("audit of ana's cancel: status %d, want 403", e.Status)
		}
	}
	for k, ok := range want {
		if !ok {
			t.Errorf("audit log lacks %q", k)
		}
	}
}

func isStatus(err error, status int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.StatusCode == status
}

// TestTokenLifecycle: tokens expire (injected clock), are revoked, are
// listed with their last use, and the last Owner of a workspace stays.
func TestTokenLifecycle(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cfg := testConfig(dir)
	cfg.Store = testStore(t, dir)
	cfg.Clock = func() time.Time { return now }
	srv, err := server.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	lab := &accessLab{srv: srv, h: h, admin: srv.AdminToken}
	var nu api.NewUser
	lab.decode(t, lab.must(t, lab.admin, "POST", "/v1/users", `{"name":"ana"}`, 201), &nu)
	var tok api.Token
	lab.decode(t, lab.must(t, nu.Token.Secret, "POST", "/v1/tokens", `{"name":"ci","expires":"1h"}`, 201), &tok)
	lab.must(t, tok.Secret, "GET", "/v1/whoami", "", 200)
	now = now.Add(2 * time.Hour)
	rec := call(h, tok.Secret, "GET", "/v1/whoami", nil)
	if rec.Code != 401 || !strings.Contains(rec.Body.String(), "token expired on 2026-05-01T13:00:00Z") {
		t.Errorf("expired token: %d %s", rec.Code, rec.Body)
	}
	var list api.List[api.Token]
	lab.decode(t, lab.must(t, nu.Token.Secret, "GET", "/v1/tokens", "", 200), &list)
	if len(list.Value) != 2 {
		t.Errorf("ana's tokens = %+v, want 2", list.Value)
	}
	lab.must(t, nu.Token.Secret, "DELETE", "/v1/tokens/"+nu.Token.ID, "", 204)
	if rec := call(h, nu.Token.Secret, "GET", "/v1/whoami", nil); rec.Code != 401 || !strings.Contains(rec.Body.String(), "revoked") {
		t.Errorf("revoked token: %d %s", rec.Code, rec.Body)
	}
	// The last Owner of a workspace cannot be removed or demoted.
	lab.must(t, lab.admin, "POST", "/v1/users", `{"name":"olga"}`, 201)
	lab.must(t, lab.admin, "POST", "/v1/workspaces/default/roles", `{"principal":"olga","role":"Owner"}`, 201)
	if rec := call(h, lab.admin, "DELETE", "/v1/workspaces/default/roles/olga", nil); rec.Code != 409 || !strings.Contains(rec.Body.String(), "last Owner") {
		t.Errorf("removing the last Owner: %d %s", rec.Code, rec.Body)
	}
	if rec := call(h, lab.admin, "POST", "/v1/workspaces/default/roles", []byte(`{"principal":"olga","role":"Reader"}`)); rec.Code != 409 {
		t.Errorf("demoting the last Owner: %d %s", rec.Code, rec.Body)
	}
	if rec := call(h, lab.admin, "DELETE", "/v1/users/olga", nil); rec.Code != 409 {
		t.Errorf("deleting the last Owner: %d %s", rec.Code, rec.Body)
	}
	if rec := call(h, lab.admin, "POST", "/v1/workspaces/default/roles", []byte(`{"principal":"olga","role":"Boss"}`)); rec.Code != 400 || !strings.Contains(rec.Body.String(), "AzureML Data Scientist") {
		t.Errorf("an unknown role: %d %s", rec.Code, rec.Body)
	}
}
