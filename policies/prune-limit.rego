# A prune removes at most 10 objects in one plan: more is usually a truncated document.
package fleet.prune_limit

max_removals := 10

deny contains msg if {
	removals := count([change | some change in input.changes; change.reason == "prune"])
	removals > max_removals
	msg := sprintf("the plan removes %d objects; a prune removes at most %d at once", [removals, max_removals])
}

test_eleven_removals_are_denied if {
	changes := [{"reason": "prune"} | some _ in numbers.range(1, 11)]
	deny == {"the plan removes 11 objects; a prune removes at most 10 at once"} with input as {"changes": changes}
}

test_ten_removals_and_any_number_of_other_changes_pass if {
	removals := [{"reason": "prune"} | some _ in numbers.range(1, 10)]
	creates := [{"reason": "document"} | some _ in numbers.range(1, 50)]
	count(deny) == 0 with input as {"changes": array.concat(removals, creates)}
}
