package spec

import "strings"

// Resources come back from the server with fields it sets (status, etag,
// cost, ...). A file that sets one is refused as read-only; a request body
// that carries them back unchanged (after `show -o json`) has them removed
// first (StripStatus), so what the server returns can be sent again.

// Kinds of resource whose status fields StripStatus knows.
const (
	KindJob       = "job"
	KindCompute   = "compute"
	KindBudget    = "budget"
	KindDataAsset = "data asset"
	KindDatastore = "datastore"
)

// statusFields are each kind's top-level fields set by the server, and
// nested ones as "parent.child".
func statusFields(kind string) []map[string]bool {
	switch kind {
	case KindJob:
		return []map[string]bool{jobStatusFields}
	case KindCompute:
		return []map[string]bool{computeStatusFields, instanceStatusFields, virtualMachineStatusFields, kubernetesStatusFields,
			{"ssh_settings.has_admin_password": true, "ssh_settings.has_ssh_key_value": true, "ssh_settings.has_ssh_private_key": true}}
	case KindBudget:
		return []map[string]bool{budgetStatusFields}
	case KindDataAsset:
		return []map[string]bool{dataAssetStatusFields}
	case KindDatastore:
		return []map[string]bool{datastoreStatusFields}
	}
	return nil
}

// StripStatus removes kind's server-set fields from a decoded body; it
// reports whether it removed any.
func StripStatus(kind string, doc map[string]any) bool {
	found := false
	for _, set := range statusFields(kind) {
		for k := range set {
			m, key := doc, k
			if parent, child, ok := strings.Cut(k, "."); ok {
				sub, isMap := doc[parent].(map[string]any)
				if !isMap {
					continue
				}
				m, key = sub, child
			}
			if _, ok := m[key]; ok {
				delete(m, key)
				found = true
			}
		}
	}
	return found
}
