//! Grants as SPEC §3 reads them, for what the planner decides about its caller: the
//! changes it may not make (blocked at plan time) and whether it may override policies.

/// Whether one of `grants` (`PERMISSION @ SCOPE`, any segment `*`) allows `permission`
/// (three segments, no wildcards) at `scope`. Text that is no grant allows nothing.
pub fn allows(grants: &[String], permission: &str, scope: &str) -> bool {
    grants.iter().any(|grant| {
        let Some((granted, granted_scope)) = grant.split_once('@') else { return false };
        let granted_scope = granted_scope.trim();
        covers(granted.trim(), permission) && (granted_scope == "*" || granted_scope == scope)
    })
}

/// Whether the permission `granted` (three segments, any of them `*`) covers `wanted`
/// (three segments), segment by segment.
fn covers(granted: &str, wanted: &str) -> bool {
    let (mut have, mut want) = (granted.split(':'), wanted.split(':'));
    for _ in 0..3 {
        match (have.next(), want.next()) {
            (Some(have), Some(want)) if have == "*" || have == want => {}
            _ => return false,
        }
    }
    have.next().is_none() && want.next().is_none()
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
        assert!(!allows(&grants(&["compute:pools @ *"]), "compute:pools:write", "compute-pools"));
        assert!(!allows(&grants(&["compute:pools:write:all @ *"]), "compute:pools:write", "compute-pools"));
        assert!(!allows(&grants(&["*:*:* @ *"]), "compute:pools", "compute-pools"));
        assert!(allows(&grants(&["*:*:* @ *"]), "compute:pools:write", "compute-pools"));
    }
}
