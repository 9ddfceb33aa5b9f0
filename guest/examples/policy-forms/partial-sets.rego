# offers-within-capacity as it was written before input.referencedBy: a pass over every
# offer gathers each pool's into a partial set.
package forms.partial_sets

resources := ["vcpus", "memoryMib", "gpus"]

# Per pool, the keys of its offers: one pass over the offers.
offers_of[pool] contains key if {
	some key, offer in input.estate.offers
	pool := offer.pool
}

# Per pool and resource, what its offers give.
offered[pool][resource] := total if {
	some pool, keys in offers_of
	some resource in resources
	total := sum([input.estate.offers[key][resource] | some key in keys])
}

deny contains {"msg": msg, "kind": "pool", "key": key} if {
	some key, totals in offered
	some resource, total in totals
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

test_offers_that_fit_pass if {
	count(deny) == 0 with input as {"estate": estate}
}

test_offers_over_a_resource_are_denied_once_for_it if {
	bigger := object.union(estate, {"offers": {"to-web": {"gpus": 3}}})
	deny == {{"msg": "its offers give 9 gpus; the pool has 8", "kind": "pool", "key": "gpu-a"}} with input as {"estate": bigger}
}
