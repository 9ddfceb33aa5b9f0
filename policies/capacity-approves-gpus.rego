# A plan that changes GPUs anywhere is approved by the capacity team: a principal whose
# name starts with `capacity-` (SPEC §17). Any other plan needs one approver.
package fleet.capacity_approves_gpus

gpu_changes contains change if {
	some change in input.changes
	some field in change.fields
	field.field == "gpus"
}

gpu_changes contains change if {
	some change in input.changes
	change.reason == "prune"
	change.before.gpus > 0
}

require_approval contains {"msg": "changes GPUs; the capacity team must approve", "kind": change.kind, "key": change.key} if {
	some change in gpu_changes
}

approvers contains review.principal if {
	some review in input.proposal.reviews
	review.verdict == "approve"
	review.principal != input.proposal.author
}

approve if {
	some principal in approvers
	startswith(principal, "capacity-")
}

approve if {
	count(gpu_changes) == 0
	count(approvers) >= 1
}

test_gpu_changes_need_the_capacity_team if {
	changes := [{"kind": "pool", "key": "gpu-a", "reason": "document", "fields": [{"field": "gpus", "from": 8, "to": 16}]}]
	count(require_approval) == 1 with input as {"changes": changes}
	not approve with input as {"changes": changes, "proposal": {"author": "alice", "reviews": [{"principal": "bob", "verdict": "approve"}]}}
	approve with input as {"changes": changes, "proposal": {"author": "alice", "reviews": [{"principal": "capacity-dana", "verdict": "approve"}]}}
}

test_other_changes_need_any_approver if {
	changes := [{"kind": "pool", "key": "cpu-a", "reason": "document", "fields": [{"field": "vcpus", "from": 8, "to": 16}]}]
	count(require_approval) == 0 with input as {"changes": changes}
	approve with input as {"changes": changes, "proposal": {"author": "alice", "reviews": [{"principal": "bob", "verdict": "approve"}]}}
}
