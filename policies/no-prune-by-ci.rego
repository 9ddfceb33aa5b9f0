# The principal ci-bot may not prune: removals need a person.
package fleet.no_prune_by_ci

principal := "ci-bot"

deny contains sprintf("%s may not prune; a person applies removals", [principal]) if {
	input.caller.principal == principal
	some change in input.changes
	change.reason == "prune"
}

test_ci_pruning_is_denied if {
	count(deny) == 1 with input as {"caller": {"principal": "ci-bot"}, "changes": [{"reason": "prune"}]}
}

test_ci_creating_and_people_pruning_pass if {
	count(deny) == 0 with input as {"caller": {"principal": "ci-bot"}, "changes": [{"reason": "document"}]}
	count(deny) == 0 with input as {"caller": {"principal": "alice"}, "changes": [{"reason": "prune"}]}
}
