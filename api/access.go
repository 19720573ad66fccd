package api

import "time"

// Built-in roles, Azure's names and meanings (see the README's security
// section): what a user may do in one workspace.
const (
	RoleReader          = "Reader"
	RoleDataScientist   = "AzureML Data Scientist"
	RoleComputeOperator = "AzureML Compute Operator"
	RoleContributor     = "Contributor"
	RoleOwner           = "Owner"
)

// Roles lists the built-in roles, from the least to the most allowed.
var Roles = []string{RoleReader, RoleDataScientist, RoleComputeOperator, RoleContributor, RoleOwner}

// Principal kinds: a person, or an identity jobs act as.
const (
	PrincipalUser     = "user"
	PrincipalIdentity = "identity"
)

// User is someone (or, with Kind identity, something) requests are
// attributed to.
type User struct {
	Name string `json:"name"`
	// Kind is "user" or "identity" (jobs act as identities; they have no
	// tokens of their own).
	Kind        string `json:"kind,omitempty"`
	Description string `json:"description,omitempty"`
	// Admin users administer the server: users, workspaces, locations and
	// quotas, and every workspace.
	Admin     bool      `json:"admin,omitempty"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// Token is an API token as lists show it. Secret is set only in the answer
// to its creation: it is shown once and never stored.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	User      string    `json:"user"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	ExpiresOn time.Time `json:"expires_on,omitzero"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	Secret    string    `json:"secret,omitempty"`
}

// TokenRequest asks for a new token. Expires is a duration ("30d", "12h");
// empty means the token does not expire.
type TokenRequest struct {
	Name    string `json:"name,omitempty"`
	User    string `json:"user,omitempty"`
	Expires string `json:"expires,omitempty"`
}

// RoleAssignment gives a principal a role in a workspace.
type RoleAssignment struct {
	Workspace string    `json:"workspace"`
	Principal string    `json:"principal"`
	Role      string    `json:"role"`
	CreatedOn time.Time `json:"created_on,omitzero"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// Secret is a workspace secret. Value is accepted when it is set and never
// returned.
type Secret struct {
	Name      string    `json:"name"`
	Workspace string    `json:"workspace,omitempty"`
	Value     string    `json:"value,omitempty"`
	UpdatedOn time.Time `json:"updated_on,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// AuditEntry is one mutating call: who, what, when, from where, result.
type AuditEntry struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	User      string    `json:"user"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Workspace string    `json:"workspace,omitempty"`
	Action    string    `json:"action"`
	Status    int       `json:"status"`
	Remote    string    `json:"remote,omitempty"`
}

// WhoAmI says who a token signs in and what it may do.
type WhoAmI struct {
	User  string            `json:"user"`
	Kind  string            `json:"kind"`
	Admin bool              `json:"admin,omitempty"`
	Roles map[string]string `json:"roles,omitempty"` // workspace -> role
	// Permissions are what those roles grant, by workspace (Studio shows
	// only the actions they allow; the API checks every call anyway).
	Permissions map[string][]string `json:"permissions,omitempty"`
	// Job is set for a job's identity token: the job attempt it belongs to.
	Job string `json:"job,omitempty"`
}

// IdentityToken is the answer of the identity endpoint, in the shape of
// Azure's managed identity endpoint.
type IdentityToken struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresOn   int64  `json:"expires_on"`
	Resource    string `json:"resource,omitempty"`
	ClientID    string `json:"client_id,omitempty"`
}

// JobIdentity is a job's `identity:`: whom its code acts as. user_identity
// and aml_token act as the user who submitted the job; managed acts as the
// compute's identity (or the identity client_id/object_id/resource_id
// names).
type JobIdentity struct {
	Type       string `json:"type"`
	ClientID   string `json:"client_id,omitempty"`
	ObjectID   string `json:"object_id,omitempty"`
	ResourceID string `json:"resource_id,omitempty"`
}

// NewUser answers a user's creation: the user and, for a person, its
// first token (shown once).
type NewUser struct {
	User  User   `json:"user"`
	Token *Token `json:"token,omitempty"`
}

// SecretKeyRotation is what a rotation of the server's secret key did:
// how many values it sealed again with the new key.
type SecretKeyRotation struct {
	Secrets              int `json:"secrets"`
	DatastoreCredentials int `json:"datastore_credentials"`
}
