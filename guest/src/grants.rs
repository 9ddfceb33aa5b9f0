//! Grants as SPEC §3 reads them, for what the planner decides about its caller: the
//! changes it may not make (blocked at plan time) and whether it may override policies.

/// Whether one of `grants` (`PERMISSION @ SCOPE`, any segment `*`) allows `permission`
/// (three segments, no wildcards) at `scope`. Text that is no grant allows nothing.
pub fn allows(grants: &[String], permission: &str, scope: &str) -> bool {
    grants.iter().any(|grant| {
        let Some((granted, granted_scope)) = grant.split_once('@') else { return false };
        let (granted, granted_scope) = (granted.trim(), granted_scope.trim());
        let segments: Vec<&str> = granted.split(':').collect();
        let wanted: Vec<&str> = permission.split(':').collect();
        segments.len() == 3
            && wanted.len() == 3
            && segments.iter().zip(&wanted).all(|(have, want)| *have == "*" || have == want)
            && (granted_scope == "*" || granted_scope == scope)
    })
}

/// The permission and scope of a module's mutations (SPEC §3).
pub fn write_permission(group: &str) -> (String, String) {
    (format!("compute:{group}:write"), format!("compute-{group}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_match_segment_by_segment_with_wildcards() {
        let grants = |list: &[&str]| list.iter().map(|grant| grant.to_string()).collect::<Vec<_>>();
        assert!(allows(&grants(&["compute:*:*@*"]), "compute:pools:write", "compute-pools"));
        assert!(allows(&grants(&["compute:pools:write @ compute-pools"]), "compute:pools:write", "compute-pools"));
        assert!(!allows(&grants(&["compute:pools:read @ compute-pools"]), "compute:pools:write", "compute-pools"));
        assert!(!allows(&grants(&["compute:pools:write @ compute-offers"]), "compute:pools:write", "compute-pools"));
        assert!(!allows(&grants(&["compute:fleet:admin @ compute-fleet"]), "compute:fleet:override", "compute-fleet"));
        assert!(!allows(&grants(&["nonsense"]), "compute:pools:write", "compute-pools"));
    }
}
