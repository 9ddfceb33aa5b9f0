# offers-within-capacity judged on the pools a plan touches: those it creates or changes,
# and those it gives a new or changed offer. A plan that leaves a pool and its offers
# alone cannot put it over; a pool already over before the plan is not reported.
package forms.changed_pools_only

resources := ["vcpus", "memoryMib", "gpus"]

touched contains change.key if {
	some change in input.changes
	change.kind == "pool"
	change.after != null
}

touched contains change.after.pool if {
	some change in input.changes
	change.kind == "offer"
	change.after != null
}

deny contains {"msg": msg, "kind": "pool", "key": key} if {
	some key in touched
	offers := object.get(input.referencedBy, ["pools", key, "offers"], [])
	some resource in resources
	total := sum([input.estate.offers[offer][resource] | some offer in offers])
	have := object.get(input.estate.pools, [key, resource], 0)
	total > have
	msg := sprintf("its offers give %d %s; the pool has %d", [total, resource, have])
}
