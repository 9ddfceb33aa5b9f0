# Every plan is proposed and approved first, except one that only adds flavors: those
# apply directly (SPEC §17).
package fleet.flavors_apply_directly

not_a_new_flavor contains change if {
	some change in input.changes
	not new_flavor(change)
}

new_flavor(change) if {
	change.kind == "flavor"
	change.action == "create"
}

require_approval contains {"msg": sprintf("%s this %s; only new flavors apply without approval", [change.action, change.kind]), "kind": change.kind, "key": change.key} if {
	some change in not_a_new_flavor
}

test_new_flavors_apply_directly if {
	count(require_approval) == 0 with input as {"changes": [
		{"kind": "flavor", "key": "small", "action": "create"},
		{"kind": "flavor", "key": "large", "action": "create"},
	]}
}

test_anything_else_needs_approval if {
	count(require_approval) == 2 with input as {"changes": [
		{"kind": "flavor", "key": "small", "action": "create"},
		{"kind": "flavor", "key": "old", "action": "delete"},
		{"kind": "pool", "key": "gpu-a", "action": "update"},
	]}
}
