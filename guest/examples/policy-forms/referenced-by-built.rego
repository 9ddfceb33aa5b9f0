# What building input.estate and input.referencedBy costs: a policy that names them and
# no more.
package forms.referenced_by_built

deny contains "never" if input.referencedBy.pools.nothing

deny contains "never" if input.estate.pools.nothing
