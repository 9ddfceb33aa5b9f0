# What building input.estate costs by itself: a policy that names it and no more.
package forms.estate_built

deny contains "never" if input.estate.pools.nothing
