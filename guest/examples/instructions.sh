#!/bin/sh
# Instructions the planner runs per create and per small plan, natively and as the
# component in the server's sandbox (host/examples/component_instructions.rs). callgrind
# counts instructions, so the machine's speed does not move them: the same build gives
# the same figures. Each is the difference of two runs, divided by what it adds.
# (Under valgrind the sandbox has no pooling allocator: instances are made on demand.)
set -eu
cd "$(dirname "$0")/../.."
cargo build --quiet --release -p fleet-guest --example instructions
cargo build --quiet --release -p fleet --example component_instructions
native=target/release/examples/instructions
component=target/release/examples/component_instructions
# Compiled under valgrind as well: the CPU features valgrind reports give another
# engine, whose artifact the counted runs would otherwise compile (minutes, counted).
valgrind --tool=none "$component" warm >/dev/null 2>&1

# The instructions of one run of a program with these arguments.
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
        sed -n 's/.*Collected : //p'
}

for planner in native component; do
    eval binary=\$$planner
    creates_small=$(count "$binary" creates 2000)
    creates_large=$(count "$binary" creates 4000)
    echo "$planner: instructions per create:     $(( (creates_large - creates_small) / 2000 ))"
    estate_once=$(count "$binary" estate 4000 1)
    estate_twice=$(count "$binary" estate 4000 2)
    echo "$planner: instructions per object of a plan of 4000, 1 % changed: $(( (estate_twice - estate_once) / 4000 ))"
    plans_one=$(count "$binary" small 1)
    plans_many=$(count "$binary" small 101)
    echo "$planner: instructions per small plan: $(( (plans_many - plans_one) / 100 ))"
done
# What instantiating the component and an almost empty call cost (an export of an empty
# estate): the fixed cost of every request (without the pooling allocator here).
empty_one=$(count "$component" empty 1)
empty_many=$(count "$component" empty 101)
echo "component: instructions per empty call: $(( (empty_many - empty_one) / 100 ))"
# Memory is not counted in instructions, but it is as repeatable: what a plan of 100k
# creates grows the component's linear memory to, per object.
echo "component: $("$component" memory 100000)"
