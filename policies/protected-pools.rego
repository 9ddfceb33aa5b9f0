# Pools labelled protected: "true" are never archived.
package fleet.protected_pools

deny contains {"msg": "is labelled protected and is never archived", "kind": "pool", "key": change.key} if {
	some change in input.changes
	change.kind == "pool"
	change.action == "archive"
	change.before.labels.protected == "true"
}

test_archiving_a_protected_pool_is_denied if {
	change := {"kind": "pool", "key": "gpu-a", "action": "archive", "before": {"labels": {"protected": "true"}}}
	count(deny) == 1 with input as {"changes": [change]}
}

test_other_pools_and_other_actions_pass if {
	changes := [
		{"kind": "pool", "key": "cpu-a", "action": "archive", "before": {"labels": {}}},
		{"kind": "pool", "key": "gpu-a", "action": "update", "before": {"labels": {"protected": "true"}}},
	]
	count(deny) == 0 with input as {"changes": changes}
}
