//! A hostile module plugin for the tests. Its kind `hazard` (group `hazards`, ids
//! `hz_...`) has a `mode` field, and its check misbehaves as the first subject's mode
//! asks: `loop` (spins forever), `allocate` (grows memory without end), `trap`,
//! `garbage` (problems of subjects that do not exist, paths that are not pointers),
//! `flood` (an answer of millions of problems), `refuse` (one honest problem at
//! `/mode`), `verbose` (one problem whose message is `size` characters long), `slow`
//! (passes after spinning `size` million rounds: a check that takes its time); any
//! other mode passes.
//!
//! Its descriptor is JSON kept in a fixed-size buffer behind [`MARKER`], so that a test
//! can rewrite it in the component file (same length, padded with spaces) to make a
//! plugin with any descriptor, valid or not, without building another component.

/// What precedes the descriptor's JSON in the component file.
pub const MARKER: &str = "FLEET-TEST-DESCRIPTOR:";

/// The room for the descriptor's JSON after the marker.
pub const ROOM: usize = 2048;

const fn padded(text: &str) -> [u8; ROOM] {
    let mut buffer = [b' '; ROOM];
    let bytes = text.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        buffer[index] = bytes[index];
        index += 1;
    }
    buffer
}

/// The marker and the descriptor, as they appear in the file.
pub static DESCRIPTOR: [u8; ROOM] = padded(concat!(
    "FLEET-TEST-DESCRIPTOR:",
    r#"{"group": "hazards", "kind": "hazard", "section": "hazards", "idPrefix": "hz", "removal": "delete","#,
    r#" "fields": [{"name": "mode", "type": "name", "required": true, "immutable": false},"#,
    r#" {"name": "size", "type": "count", "required": false, "immutable": false}]}"#
));

/// The descriptor's JSON as the file holds it now, read through an opaque pointer so
/// that the compiler cannot fold it into code.
pub fn descriptor_json() -> String {
    let bytes: &[u8; ROOM] = std::hint::black_box(&DESCRIPTOR);
    let text = String::from_utf8_lossy(bytes);
    text.strip_prefix(MARKER).unwrap_or_default().trim_end().to_owned()
}

#[cfg(target_arch = "wasm32")]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod component {
    wit_bindgen::generate!({ world: "module-plugin", path: "../../wit/module" });

    use compute::module::types::{Descriptor, Field, FieldType, Problem, Removal, Subject};
    use exports::compute::module::plugin::Guest;
    use serde_json::Value;

    struct Hostile;

    export!(Hostile);

    fn text(value: &Value, name: &str) -> String {
        value.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
    }

    fn flag(value: &Value, name: &str) -> bool {
        value.get(name).and_then(Value::as_bool).unwrap_or_default()
    }

    impl Guest for Hostile {
        /// The descriptor of the JSON in the file, whatever it says.
        fn describe() -> Descriptor {
            let json: Value = serde_json::from_str(&super::descriptor_json()).unwrap_or(Value::Null);
            let removal = match text(&json, "removal").as_str() {
                "archive" => Removal::Archive,
                "never" => Removal::Never,
                _ => Removal::Delete,
            };
            let fields = json.get("fields").and_then(Value::as_array).cloned().unwrap_or_default();
            let fields = fields
                .iter()
                .map(|field| Field {
                    name: text(field, "name"),
                    type_: match text(field, "type").as_str() {
                        "string" => FieldType::String,
                        "name" => FieldType::Name,
                        "count" => FieldType::Count,
                        "bool" => FieldType::Bool,
                        "map" => FieldType::Map,
                        _ => FieldType::Ref(text(field, "ref")),
                    },
                    required: flag(field, "required"),
                    immutable: flag(field, "immutable"),
                })
                .collect();
            Descriptor {
                group: text(&json, "group"),
                kind: text(&json, "kind"),
                section: text(&json, "section"),
                id_prefix: text(&json, "idPrefix"),
                removal,
                fields,
            }
        }

        fn check(subjects: Vec<Subject>) -> Vec<Problem> {
            let first: Value =
                subjects.first().and_then(|subject| serde_json::from_str(&subject.object).ok()).unwrap_or(Value::Null);
            let problem = |subject: u32, path: &str, message: String| Problem { subject, path: path.into(), message };
            match text(&first, "mode").as_str() {
                "loop" => loop {
                    std::hint::black_box(0);
                },
                "allocate" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(vec![1; 1 << 20]);
                        std::hint::black_box(&hoard);
                    }
                }
                "trap" => std::process::abort(),
                "garbage" => vec![problem(1 << 30, "not a pointer", "\u{0}".into())],
                "flood" => (0..4_000_000).map(|n| problem(0, "/mode", format!("problem {n}"))).collect(),
                "refuse" => vec![problem(0, "/mode", "mode refuse is refused".into())],
                "verbose" => {
                    let size = first.get("size").and_then(Value::as_u64).unwrap_or(0) as usize;
                    vec![problem(0, "/mode", "v".repeat(size.max(1)))]
                }
                "slow" => {
                    let rounds = first.get("size").and_then(Value::as_u64).unwrap_or(0) * 1_000_000;
                    let mut counter = 0u64;
                    for _ in 0..rounds {
                        counter = std::hint::black_box(counter.wrapping_add(1));
                    }
                    Vec::new()
                }
                _ => Vec::new(),
            }
        }
    }
}
