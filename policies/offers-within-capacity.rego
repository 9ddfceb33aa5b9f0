# The offers of a pool together never give more than the pool has: vcpus, memoryMib
# and gpus, each summed over the estate as it will be once the plan is applied.
package fleet.offers_within_capacity

resources := ["vcpus", "memoryMib", "gpus"]

# Each pool's offers are looked up in input.referencedBy rather than found by a scan of
# every offer: see "Writing fast policies" in docs/guide/guardrails.md.
deny contains {"msg": msg, "kind": "pool", "key": key} if {
	some key, referrers in input.referencedBy.pools
	some resource in resources
	total := sum([input.estate.offers[offer][resource] | some offer in object.get(referrers, "offers", [])])
	have := object.get(input.estate.pools, [key, resource], 0)
	total > have
	msg := sprintf("its offers give %d %s; the pool has %d", [total, resource, have])
}

estate := {
	"pools": {"gpu-a": {"vcpus": 64, "memoryMib": 1024, "gpus": 8}},
	"offers": {
		"to-ml": {"pool": "gpu-a", "vcpus": 32, "memoryMib": 512, "gpus": 6},
		"to-web": {"pool": "gpu-a", "vcpus": 32, "memoryMib": 512, "gpus": 2},
	},
}

referenced_by := {"pools": {"gpu-a": {"offers": ["to-ml", "to-web"]}}}

test_offers_that_fit_pass if {
	count(deny) == 0 with input as {"estate": estate, "referencedBy": referenced_by}
}

test_offers_over_a_resource_are_denied_once_for_it if {
	bigger := object.union(estate, {"offers": {"to-web": {"gpus": 3}}})
	deny == {{"msg": "its offers give 9 gpus; the pool has 8", "kind": "pool", "key": "gpu-a"}} with input as {"estate": bigger, "referencedBy": referenced_by}
}

test_offers_of_a_pool_that_is_gone_are_denied_for_each_resource if {
	denied := deny with input as {"estate": {"pools": {}, "offers": estate.offers}, "referencedBy": referenced_by}
	count(denied) == 3
	{"msg": "its offers give 64 vcpus; the pool has 0", "kind": "pool", "key": "gpu-a"} in denied
}
