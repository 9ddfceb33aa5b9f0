//! The host's request reader: any bytes as the body of every module's create and
//! update. It never panics; what it accepts is strict JSON without control characters,
//! and every count it keeps is at most 2^53 - 1.

#![no_main]

use std::sync::Arc;

use fleet::calls::input::{Input, MAX_COUNT};
use fleet::modules::{Module, read_fields};
use fleet_guest::Catalog;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = fleet::calls::parse_body(data) else { return };
    assert!(!has_control(&body), "accepted a control character: {body}");
    let catalog = Arc::new(Catalog::built_in());
    for (position, _) in catalog.iter() {
        let module = Module::new(catalog.clone(), position, None);
        for create in [true, false] {
            let Ok(mut input) = Input::new(body.clone()) else { return };
            let fields = read_fields(&module, &mut input, create);
            if input.finish().is_ok() {
                for value in fields.values() {
                    assert!(value.as_u64().is_none_or(|count| count <= MAX_COUNT), "{value}");
                }
            }
        }
    }
});

fn has_control(value: &Value) -> bool {
    match value {
        Value::String(text) => fleet_guest::json::has_control(text),
        Value::Array(items) => items.iter().any(has_control),
        Value::Object(map) => map.iter().any(|(key, item)| fleet_guest::json::has_control(key) || has_control(item)),
        _ => false,
    }
}
