#!/bin/sh
# Instructions the native planner runs per create and per small plan (callgrind counts
# instructions, so the machine's speed does not move them; the same build gives the
# same figures). Each is the difference of two runs, divided by what it adds.
set -eu
cd "$(dirname "$0")/../.."
cargo build --quiet --release -p fleet-guest --example instructions
binary=target/release/examples/instructions

# The instructions of one run of the example with these arguments.
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$binary" "$@" 2>&1 >/dev/null |
        sed -n 's/.*Collected : //p'
}

creates_small=$(count creates 2000)
creates_large=$(count creates 4000)
echo "instructions per create:     $(( (creates_large - creates_small) / 2000 ))"
plans_one=$(count small 1)
plans_many=$(count small 201)
echo "instructions per small plan: $(( (plans_many - plans_one) / 200 ))"
