# A plan that removes objects (prune) is proposed and approved by two principals other
# than its author; any other plan by one (SPEC §17).
package fleet.two_approvals_for_prune

removals contains change if {
	some change in input.changes
	change.reason == "prune"
}

require_approval contains {"msg": sprintf("removes this %s; two reviewers must approve", [change.kind]), "kind": change.kind, "key": change.key} if {
	some change in removals
}

approvers contains review.principal if {
	some review in input.proposal.reviews
	review.verdict == "approve"
	review.principal != input.proposal.author
}

approve if count(approvers) >= 2

approve if {
	count(removals) == 0
	count(approvers) >= 1
}

test_a_prune_needs_approval_and_two_approvers if {
	input_ := {"changes": [{"kind": "pool", "key": "old", "reason": "prune"}], "proposal": {"author": "alice", "reviews": [
		{"principal": "bob", "verdict": "approve"},
		{"principal": "alice", "verdict": "approve"},
	]}}
	count(require_approval) == 1 with input as input_
	not approve with input as input_
	approve with input as object.union(input_, {"proposal": {"author": "alice", "reviews": [
		{"principal": "bob", "verdict": "approve"},
		{"principal": "carol", "verdict": "approve"},
	]}})
}

test_other_plans_need_one_approver if {
	input_ := {"changes": [{"kind": "pool", "key": "new", "reason": "document"}], "proposal": {"author": "alice", "reviews": [{"principal": "bob", "verdict": "approve"}]}}
	count(require_approval) == 0 with input as input_
	approve with input as input_
}
