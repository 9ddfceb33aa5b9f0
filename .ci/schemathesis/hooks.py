"""Schemathesis hooks for fleet's API fuzzing in CI (.ci/api-fuzz).

SPEC §8 allows a schema-valid request to be refused for the state it meets. Three such
refusals answer 400 and no schema can express them: a change to an immutable field
(SPEC §4), an offer `to` its pool's own owner (SPEC §4), and a module plugin's own
rules (SPEC §10: the example `reservations` plugin's times and capacities). Two more
are content no JSON Schema can state: a policy source that is not Rego (SPEC §14), and
objects for a plugin check that are not objects of their kinds (compute.preview.check).
A webhook's or a git source's URL must resolve to public addresses (SPEC §18, §20.3),
which is the network's answer, and a source's allowed signers are OpenSSH keys. Renames (SPEC §15) and overrides (SPEC §14) compare entries with each other: `from`
equal to `to`, two entries of a kind moving the same name, two overrides of one policy. schemathesis.toml turns
the stock positive_data_acceptance check off (its per-operation switch does not reach
the stateful phase); this check takes its place everywhere: schema-valid data must be
accepted exactly as the stock check demands, except for those two refusals on the
operations that have them.
"""

import schemathesis
# Internal, as the stock check uses it; schemathesis is pinned in .ci/api-fuzz.
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case

# The operations whose 400s may be one of the documented state-dependent refusals.
STATE_RULES = {
    "/api/compute/accounts/update",
    "/api/compute/pools/update",
    "/api/compute/flavors/update",
    "/api/compute/offers/create",
    "/api/compute/offers/update",
    "/api/compute/reservations/create",
    "/api/compute/reservations/update",
    "/api/compute/policies/put",
    "/api/compute/preview/check",
    "/api/compute/fleet/plan",
    "/api/compute/fleet/apply",
    "/api/compute/proposals/create",
    "/api/compute/webhooks/put",
    "/api/compute/sources/put",
}

# What a document's renames may be refused for, by comparing them (docs/decisions/0016).
RENAME_RULES = ("is the same name as from", "another entry moves")

# The reservations plugin's rules (plugins/reservations): their paths and messages.
PLUGIN_RULES = {
    "/startsAt": "startsAt must be an RFC 3339 UTC time",
    "/endsAt": ("endsAt must be an RFC 3339 UTC time", "endsAt must be later than startsAt"),
    "/vcpus": "vcpus ",
    "/gpus": "gpus ",
}

ACCEPTED = {"2", "3"}
# As schemathesis' own default: credentials, missing objects, conflicts, overload.
ALSO_ACCEPTED = {401, 403, 404, 409, 429}


def documented(problem):
    message = problem.get("message", "")
    # A policy's source is Rego: one that does not compile says where (SPEC §14).
    if problem.get("path") == "/source" and message.startswith("line "):
        return True
    # An override must name a policy in force (SPEC §14).
    if problem.get("path") == "/overrides" and message.startswith("no policy "):
        return True
    # A plugin check's objects must be objects of their kinds (SPEC §10, §11).
    if problem.get("path", "").startswith("/subjects/"):
        return True
    if problem.get("path", "").startswith("/moved/") and message.startswith(RENAME_RULES):
        return True
    # Overrides compare entries too: each policy is overridden once (SPEC §14).
    if problem.get("path", "").startswith("/overrides/") and message == "names a policy another override names":
        return True
    # A webhook's host must resolve, and only to public addresses (SPEC §18): the
    # network's answer, which no schema states.
    # Its form too is stated only roughly by a pattern: an absolute URL with a host.
    if problem.get("path") == "/url" and ("does not resolve" in message or "not a public address" in message
                                          or "resolves to no address" in message
                                          or message.startswith(("must be an absolute URL", "must name a host"))):
        return True
    # A git source's host too (SPEC §20.3), and it must be a name or an address written
    # plainly; an allowed signer is an OpenSSH key, whose encoding no pattern states.
    if problem.get("path") == "/url" and ("cannot resolve" in message or "resolves to" in message
                                          or "is neither a DNS name nor an IP address" in message):
        return True
    if problem.get("path", "").startswith("/signers/"):
        return True
    if message.startswith("is immutable: it cannot change from"):
        return True
    if problem.get("path") in PLUGIN_RULES and message.startswith(PLUGIN_RULES[problem["path"]]):
        return True
    # The kinds' `Differs` rule (docs/decisions/0008): "to is the owner of pool <id> (<owner>)".
    return problem.get("path") == "/to" and message.startswith("to is the owner of pool ")


@schemathesis.check
def positive_data_acceptance_with_state_rules(ctx, response, case):
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if is_unexpected_http_status_case(case):
        return None
    status = response.status_code
    if str(status)[0] in ACCEPTED or status in ALSO_ACCEPTED or status >= 500:
        return None
    if status == 400 and case.operation.path in STATE_RULES:
        error = response.json().get("error", {})
        problems = error.get("details", {}).get("problems", [])
        if problems and all(documented(problem) for problem in problems):
            return None
    raise AssertionError(f"Valid data should have been accepted: {status} {response.text[:500]}")
