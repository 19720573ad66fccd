package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		check   func(t *testing.T, c Server)
		wantErr string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c Server) {
				if c.Listen != DefaultListen || c.AdvertiseURL != "http://"+DefaultListen || c.Replica != host+":7430" {
					t.Errorf("listen %q advertise %q replica %q", c.Listen, c.AdvertiseURL, c.Replica)
				}
				if c.AgentServerURLs() != c.AdvertiseURL {
					t.Errorf("agent URLs %q, want the advertised URL", c.AgentServerURLs())
				}
				if c.HeartbeatInterval != 2*time.Second || c.UnusableAfter != 10*time.Second {
					t.Errorf("heartbeat %v unusable %v", c.HeartbeatInterval, c.UnusableAfter)
				}
			},
		},
		{
			name: "replicas from a file",
			file: "listen: 127.0.0.1:8001\nreplica: a\nagent_urls: [http://127.0.0.1:8001, http://127.0.0.1:8002]\nheartbeat_interval: 500ms\n",
			check: func(t *testing.T, c Server) {
				if c.Replica != "a" || c.AgentServerURLs() != "http://127.0.0.1:8001,http://127.0.0.1:8002" || c.HeartbeatInterval != 500*time.Millisecond {
					t.Errorf("replica %q agent URLs %q heartbeat %v", c.Replica, c.AgentServerURLs(), c.HeartbeatInterval)
				}
			},
		},
		{
			name: "environment",
			env:  map[string]string{"TIDE_REPLICA": "b", "TIDE_AGENT_URLS": "http://lb:7430", "TIDE_STORE": "postgres://db/tide"},
			check: func(t *testing.T, c Server) {
				if c.Replica != "b" || c.AgentServerURLs() != "http://lb:7430" || c.Store != "postgres://db/tide" {
					t.Errorf("replica %q agent URLs %q store %q", c.Replica, c.AgentServerURLs(), c.Store)
				}
			},
		},
		{name: "unknown field", file: "replicas: 2\n", wantErr: "field replicas not found"},
		{name: "bad listen", file: "listen: nowhere\n", wantErr: "listen: want HOST:PORT"},
		{
			name: "default datastore on blob storage",
			file: "data_dir: /srv/tide\ndefault_datastores:\n  workspaceblobstore:\n    type: azure_blob\n    account_name: acct\n    container_name: data\n    account_key: a2V5\n",
			check: func(t *testing.T, c Server) {
				d := c.DefaultDatastore("team", "workspaceblobstore")
				if d.Type != "azure_blob" || d.ContainerName != "data" || d.Credentials.Kind() != "account_key" {
					t.Errorf("workspaceblobstore = %+v", d)
				}
				if a := c.DefaultDatastore("team", "workspaceartifactstore"); a.Type != "local" || a.Path != "/srv/tide/datastores/team/workspaceartifactstore" {
					t.Errorf("workspaceartifactstore = %+v", a)
				}
			},
		},
		{name: "unknown default datastore", file: "default_datastores:\n  mystore:\n    type: local\n    path: /x\n", wantErr: "default_datastores.mystore: not a default datastore"},
		{
			name: "storage in a blob container, its key from the environment",
			file: "data_dir: /srv/tide\nsecrets_key_file: /etc/tide/secrets.key\nstorage:\n  type: azure_blob\n  account_name: acct\n  container_name: tide\n",
			env:  map[string]string{"TIDE_STORAGE_ACCOUNT_KEY": "a2V5"},
			check: func(t *testing.T, c Server) {
				d := c.StorageDatastore()
				if d.Type != "azure_blob" || d.ContainerName != "tide" || d.Credentials == nil || d.Credentials.AccountKey != "a2V5" {
					t.Errorf("storage: %+v", d)
				}
				if c.SecretKeyPath() != "/etc/tide/secrets.key" {
					t.Errorf("secret key path %q", c.SecretKeyPath())
				}
			},
		},
		{
			name: "storage defaults to the data dir",
			file: "data_dir: /srv/tide\n",
			check: func(t *testing.T, c Server) {
				if d := c.StorageDatastore(); d.Type != "local" || d.Path != "/srv/tide" || c.SecretKeyPath() != "/srv/tide/secrets.key" {
					t.Errorf("storage %+v, key %s", d, c.SecretKeyPath())
				}
			},
		},
		{name: "storage without its container", file: "storage:\n  type: azure_blob\n  account_name: acct\n", wantErr: "storage: container_name: required"},
		{name: "storage with a blob field on a folder", file: "storage:\n  path: /srv/files\n  account_name: acct\n", wantErr: "storage: account_name: belongs to azure_blob"},
		{name: "storage of an unknown type", file: "storage:\n  type: s3\n", wantErr: "storage: type: \"s3\" is not a datastore type"},
		{name: "storage field misspelt", file: "storage:\n  container: x\n", wantErr: "field container not found"},
		{name: "bad default datastore", file: "default_datastores:\n  workspaceblobstore:\n    type: azure_blob\n    account_name: acct\n", wantErr: "default_datastores.workspaceblobstore: container_name: required"},
		{name: "default limits", check: wantLimits(map[string]Limit{"any": {DefaultSubmitRate, DefaultSubmitBurst, DefaultMaxQueuedJobs}})},
		{
			name: "server and workspace limits",
			file: "limits:\n  submit_rate: 5\n  max_queued_jobs: 50\n  workspaces:\n    batch: {submit_rate: 0.5, submit_burst: 3}\n",
			check: wantLimits(map[string]Limit{
				"default": {SubmitRate: 5, SubmitBurst: DefaultSubmitBurst, MaxQueuedJobs: 50},
				"batch":   {SubmitRate: 0.5, SubmitBurst: 3, MaxQueuedJobs: 50},
			}),
		},
		{name: "negative rate", file: "limits:\n  submit_rate: -1\n", wantErr: "limits.submit_rate: want submissions per second, more than 0 (got -1)"},
		{name: "infinite rate", file: "limits:\n  submit_rate: .inf\n", wantErr: "limits.submit_rate: want submissions per second"},
		{name: "rate not a number", file: "limits:\n  submit_rate: fast\n", wantErr: "cannot unmarshal !!str `fast` into float64"},
		{name: "negative burst", file: "limits:\n  submit_burst: -5\n", wantErr: "limits.submit_burst: want a number of submissions, 1 or more (got -5)"},
		{name: "burst not a number", file: "limits:\n  submit_burst: lots\n", wantErr: "cannot unmarshal !!str `lots` into int"},
		// yaml.v3 alone decodes these as 2 and 7, silently.
		{name: "burst with a fraction", file: "limits:\n  submit_burst: 2.5\n", wantErr: ":2: limits.submit_burst: want a whole number, got 2.5"},
		{name: "a workspace's cap with a fraction", file: "limits:\n  workspaces:\n    team-a:\n      max_queued_jobs: 7.9\n", wantErr: ":4: limits.workspaces.team-a.max_queued_jobs: want a whole number, got 7.9"},
		{name: "a whole float is a whole number", file: "limits:\n  submit_burst: 20.0\n", check: func(t *testing.T, c Server) {
			if c.Limits.SubmitBurst != 20 {
				t.Errorf("submit_burst 20.0 = %d", c.Limits.SubmitBurst)
			}
		}},
		{name: "negative queue", file: "limits:\n  max_queued_jobs: -1\n", wantErr: "limits.max_queued_jobs: want a number of jobs, 1 or more (got -1)"},
		{name: "workspace's bad limit named", file: "limits:\n  workspaces:\n    team-a: {max_queued_jobs: -3}\n", wantErr: "limits.workspaces.team-a.max_queued_jobs: want a number of jobs, 1 or more (got -3)"},
		{name: "unknown limit", file: "limits:\n  max_running_jobs: 3\n", wantErr: "field max_running_jobs not found"},
		{name: "unknown workspace limit", file: "limits:\n  workspaces:\n    a: {rate: 3}\n", wantErr: "field rate not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file != "" {
				path = filepath.Join(t.TempDir(), "tide.yaml")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// wantLimits checks the limits of workspaces (name → limits).
func wantLimits(want map[string]Limit) func(*testing.T, Server) {
	return func(t *testing.T, c Server) {
		for ws, w := range want {
			if got := c.Limits.For(ws); got != w {
				t.Errorf("limits of %s = %+v, want %+v", ws, got, w)
			}
		}
	}
}
