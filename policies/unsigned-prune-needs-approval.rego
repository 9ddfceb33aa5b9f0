# A git source's commit that removes objects (prune) is applied directly only when one
# of the source's allowed signers signed it; an unsigned one is proposed for review
# (SPEC §20.3: `input.source`). A plan that comes from no source is left alone.
package fleet.unsigned_prune_needs_approval

removals contains change if {
	some change in input.changes
	change.reason == "prune"
}

require_approval contains sprintf("removes %d object(s) at %s of %s, which no allowed signer signed; a reviewer must approve", [count(removals), object.get(input.source, "commit", "a document not yet committed"), input.source.branch]) if {
	count(removals) > 0
	input.source
	not input.source.signer
}

test_an_unsigned_prune_from_a_source_needs_approval if {
	count(require_approval) == 1 with input as {"changes": [{"reason": "prune"}], "source": {"url": "https://git.example/estate.git", "branch": "main", "commit": "0123456789ab", "path": "fleet"}}
}

test_a_signed_prune_a_prune_from_no_source_and_a_source_without_prune_pass if {
	signed := {"url": "https://git.example/estate.git", "branch": "main", "commit": "0123456789ab", "path": "fleet", "signer": "SHA256:abc"}
	count(require_approval) == 0 with input as {"changes": [{"reason": "prune"}], "source": signed}
	count(require_approval) == 0 with input as {"changes": [{"reason": "prune"}]}
	count(require_approval) == 0 with input as {"changes": [{"reason": "document"}], "source": object.remove(signed, ["signer"])}
}
