//! The storage of module objects against a migrated database.

use fleet_guest::kinds::BUILT_IN;

/// A descriptor field without its column (or a column of another type) fails here,
/// not in a request: every kind's objects round-trip through a migrated database.
#[test]
fn every_built_in_kind_has_its_table_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let pool = crate::db::open_with(&dir.path().join("fleet.db"), crate::db::Options::default()).unwrap();
    let db = pool.get().unwrap();
    crate::calls::auth::create_tenant(&db, "acme", "2026-11-30T00:00:00Z").unwrap();
    for kind in BUILT_IN {
        let fields = kind
            .fields
            .iter()
            .map(|field| {
                let value = serde_json::to_value(fleet_guest::Value::default_of(field.ty)).unwrap();
                (field.name.to_owned(), value)
            })
            .collect();
        let now = "2026-11-30T00:00:00Z".to_owned();
        let key = match kind.id_prefix() {
            Some(prefix) => crate::modules::new_id(prefix),
            None => "team-ml".to_owned(),
        };
        let object =
            super::Object { key: key.clone(), fields, archived: false, created_at: now.clone(), updated_at: now };
        super::rows::insert(&db, kind, "acme", &object, None).unwrap();
        assert_eq!(super::rows::load(&db, kind, "acme", &key).unwrap(), Some(object), "{}", kind.kind);
        let mut state = fleet_guest::state::StateWriter::new();
        state.modules([kind.kind]);
        super::encode_table(&db, kind, "acme", &mut state).unwrap();
        state.bindings([]);
        let snapshot = fleet_guest::state::decode(&fleet_guest::Catalog::built_in(), &state.finish()).unwrap();
        assert_eq!(snapshot.objects(kind.kind).len(), 1, "{}", kind.kind);
    }
}

/// An apply's overlay reads its own writes (before and after it reads a table
/// whole), hands an archived object's idempotency key to a new one, and its flush
/// leaves the database as the same calls made one by one would.
#[test]
fn an_overlay_reads_its_own_writes_and_flushes_them_in_order() {
    use super::{Objects, Overlay};
    let dir = tempfile::tempdir().unwrap();
    let pool = crate::db::open_with(&dir.path().join("fleet.db"), crate::db::Options::default()).unwrap();
    let db = pool.get().unwrap();
    crate::calls::auth::create_tenant(&db, "acme", "2026-11-30T00:00:00Z").unwrap();
    let site = &fleet_guest::kinds::SITE;
    let object = |key: &str, region: &str| super::Object {
        key: key.into(),
        fields: serde_json::json!({"region": region, "description": "", "labels": {}}).as_object().unwrap().clone(),
        archived: false,
        created_at: "2026-11-30T00:00:00Z".into(),
        updated_at: "2026-11-30T00:00:00Z".into(),
    };
    let direct = Objects { db: &db, tenant: "acme", overlay: None };
    let ids: Vec<String> = (0..40).map(|_| crate::modules::new_id("site")).collect();
    for (n, id) in ids.iter().enumerate() {
        direct.insert(site, &object(id, "r"), Some(&format!("key-{n}"))).unwrap();
    }
    let overlay = Overlay::default();
    let through = Objects { db: &db, tenant: "acme", overlay: Some(&overlay) };
    // More lookups than it sends to the database before reading the table whole.
    for (n, id) in ids.iter().enumerate() {
        assert!(through.is_live(site, id).unwrap(), "{n}");
    }
    let fresh = crate::modules::new_id("site");
    through.insert(site, &object(&fresh, "new"), Some("fresh")).unwrap();
    through.write(site, &object(&ids[0], "moved")).unwrap();
    through.delete(site, &ids[1]).unwrap();
    through.release_idempotency_key(site, &ids[2]).unwrap();
    assert_eq!(through.load(site, &fresh).unwrap().unwrap().text("region"), "new");
    assert_eq!(through.load(site, &ids[0]).unwrap().unwrap().text("region"), "moved");
    assert_eq!(through.load(site, &ids[1]).unwrap(), None);
    assert_eq!(through.load_by_idempotency_key(site, "key-0").unwrap().unwrap().key, ids[0], "kept its key");
    assert_eq!(through.load_by_idempotency_key(site, "key-1").unwrap(), None, "deleted");
    assert_eq!(through.load_by_idempotency_key(site, "key-2").unwrap(), None, "released");
    assert_eq!(through.load_by_idempotency_key(site, "fresh").unwrap().unwrap().key, fresh);
    assert_eq!(through.live_keys_where(site, "region", "moved").unwrap(), [ids[0].clone()]);
    assert_eq!(direct.load(site, &fresh).unwrap(), None, "nothing is written before the flush");
    // The released key goes to a new object in the same apply.
    let heir = crate::modules::new_id("site");
    through.insert(site, &object(&heir, "r"), Some("key-2")).unwrap();

    overlay.flush(&db, "acme").unwrap();
    assert_eq!(direct.load(site, &fresh).unwrap().unwrap().text("region"), "new");
    assert_eq!(direct.load(site, &ids[0]).unwrap().unwrap().text("region"), "moved");
    assert_eq!(direct.load(site, &ids[1]).unwrap(), None);
    assert_eq!(direct.load_by_idempotency_key(site, "key-0").unwrap().unwrap().key, ids[0]);
    assert_eq!(direct.load_by_idempotency_key(site, "key-2").unwrap().unwrap().key, heir);
    assert_eq!(direct.load_by_idempotency_key(site, "fresh").unwrap().unwrap().key, fresh);
    assert_eq!(super::rows::load_all(&db, site, "acme").unwrap().len(), 41);
}

#[test]
fn columns_are_snake_case_and_quoted() {
    assert_eq!(super::column("memoryMib"), "\"memory_mib\"");
    assert_eq!(super::column("to"), "\"to\"");
    assert_eq!(super::column("credentialsRef"), "\"credentials_ref\"");
}
