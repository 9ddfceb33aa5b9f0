# At most 64 GPUs in any one pool: a bigger one is a typo or needs a second pool.
package fleet.gpus_per_pool

max_gpus := 64

deny contains {"msg": msg, "kind": "pool", "key": change.key} if {
	some change in input.changes
	change.kind == "pool"
	change.after.gpus > max_gpus
	msg := sprintf("asks for %d GPUs; a pool has at most %d", [change.after.gpus, max_gpus])
}

test_a_pool_over_the_limit_is_denied if {
	denials := deny with input as {"changes": [{"kind": "pool", "key": "gpu-a", "after": {"gpus": 96}}]}
	denials == {{"msg": "asks for 96 GPUs; a pool has at most 64", "kind": "pool", "key": "gpu-a"}}
}

test_a_pool_at_the_limit_and_removals_pass if {
	count(deny) == 0 with input as {"changes": [
		{"kind": "pool", "key": "gpu-a", "after": {"gpus": 64}},
		{"kind": "pool", "key": "gpu-b", "after": null},
	]}
}
