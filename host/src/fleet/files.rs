//! A FleetConfig document in files (SPEC §20.1): one file read as JSON or YAML, and the
//! files of a directory merged section by section into one document.
//!
//! Pure: the caller lists and reads the files — the command line from a directory on
//! disk, a git source from a commit's tree — and hands their names and texts here, so
//! that both read and merge a document the same way. Names only name files in messages
//! and pick the format; their order decides nothing else.

use std::collections::HashMap;

use fleet_guest::error::{Problem, Problems};
use fleet_guest::json::{Reading, Refusal, pointer};
use serde::Deserialize as _;
use serde_json::{Map, Value};

/// The most bytes one file of a document may hold: what a server accepts as a whole
/// request body by default (`serve --body-limit`). A document that needs more is split
/// over the files of a directory; the server judges the whole it is sent.
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// Whether a directory's entry called `name` is a file of its document: `*.yaml`,
/// `*.yml` or `*.json`, and not hidden (a name starting with `.`).
pub fn is_document_file(name: &str) -> bool {
    !name.starts_with('.') && [".yaml", ".yml", ".json"].iter().any(|extension| name.ends_with(extension))
}

/// Whether the file called `name` is YAML by its extension.
pub fn is_yaml_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Why one file's text is no document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Not JSON or YAML; `reason` says where and why.
    #[error("{file}: {reason}")]
    Unparsable { file: String, reason: String },
    /// YAML with a second document after `---`: which of them was meant is not for us to
    /// guess, and reading the first alone would drop the rest without a word.
    #[error("{file}: holds more than one YAML document (a `---` line starts another); put one in each file")]
    SeveralDocuments { file: String },
    /// Nothing but whitespace or comments, or `null`: refused rather than read as an
    /// empty document, so that a truncated file cannot prune what it held.
    #[error("{file}: holds no document (it is empty, only comments, or null)")]
    Empty { file: String },
}

/// Reads the file called `name` as a FleetConfig document's file would be: JSON read
/// strictly (SPEC §2) within the memory a request body of its size may take, or YAML —
/// by the name's extension (`.yaml`, `.yml`, `.json`), else JSON when the text starts
/// with `{`.
pub fn parse(name: &str, text: &str) -> Result<Value, FileError> {
    parse_with(name, text, &Reading::bounded(&[], text.len()))
}

/// [`parse`] with JSON read as `reading` says: which strings may hold line breaks (a
/// saved plan's policy sources), and in how much memory.
pub fn parse_with(name: &str, text: &str, reading: &Reading) -> Result<Value, FileError> {
    let unparsable = |reason: String| FileError::Unparsable { file: name.to_owned(), reason };
    let is_json = name.ends_with(".json") || (!is_yaml_name(name) && text.trim_start().starts_with('{'));
    let value = if is_json {
        if text.trim().is_empty() {
            return Err(FileError::Empty { file: name.to_owned() });
        }
        fleet_guest::json::read(text, reading).map_err(|refusal| unparsable(refusal_reason(refusal)))?
    } else {
        let mut documents = serde_yaml_ng::Deserializer::from_str(text);
        let Some(document) = documents.next() else { return Err(FileError::Empty { file: name.to_owned() }) };
        // YAML's own value first: it refuses a key written twice in one mapping, where
        // serde_json's would keep the last one without a word.
        let yaml = serde_yaml_ng::Value::deserialize(document).map_err(|error| unparsable(error.to_string()))?;
        if documents.next().is_some() {
            return Err(FileError::SeveralDocuments { file: name.to_owned() });
        }
        serde_yaml_ng::from_value(yaml).map_err(|error| unparsable(error.to_string()))?
    };
    if value.is_null() {
        return Err(FileError::Empty { file: name.to_owned() });
    }
    Ok(value)
}

/// The strict JSON reader's refusal as one line: its problems, `path: message` each.
fn refusal_reason(refusal: Refusal) -> String {
    let problems = match refusal {
        Refusal::Invalid(problems) => problems,
        Refusal::TooLarge { budget } => return format!("takes more than {budget} bytes of memory to read"),
    };
    let mut listed: Vec<String> = problems
        .listed()
        .iter()
        .map(|problem| match problem.path.as_str() {
            "" => problem.message.clone(),
            path => format!("{path}: {}", problem.message),
        })
        .collect();
    if problems.total() > listed.len() {
        listed.push(format!("and {} more", problems.total() - listed.len()));
    }
    listed.join("; ")
}

/// Merges the files of one document, each `(name, document)`, into one: every file an
/// object whose members are sections (`pools`, `moved`, a plugin's section…). A section
/// in several files is merged by its shape: the keys of an object (`pools`: objects by
/// key) are gathered, the entries of an array (`moved`) appended in the files' order.
///
/// Refused, every problem at once, each at the JSON pointer of what clashes and naming
/// the files: no file; a file that is not an object; a key of a section in two files;
/// a section that is an object in one file and anything else in another; and a section
/// that is neither object nor array in two files.
pub fn merge(files: Vec<(String, Value)>) -> Result<Value, Problems> {
    let mut problems = Problems::default();
    if files.is_empty() {
        problems
            .push(Problem { path: String::new(), message: "no document file (*.yaml, *.yml or *.json)".to_owned() });
        return Err(problems);
    }
    let (names, documents): (Vec<String>, Vec<Value>) = files.into_iter().unzip();
    let mut merged = Map::new();
    // Which file each section, and each key of an object section, came from first.
    let mut section_from: HashMap<String, usize> = HashMap::new();
    let mut key_from: HashMap<(String, String), usize> = HashMap::new();
    for (file, document) in documents.into_iter().enumerate() {
        let Value::Object(sections) = document else {
            let message = format!("{} is {}, not an object of sections", names[file], shape(&document));
            problems.push(Problem { path: String::new(), message });
            continue;
        };
        for (section, content) in sections {
            let Some(&first) = section_from.get(&section) else {
                if let Value::Object(objects) = &content {
                    key_from.extend(objects.keys().map(|key| ((section.clone(), key.clone()), file)));
                }
                section_from.insert(section.clone(), file);
                merged.insert(section, content);
                continue;
            };
            let both = |first: usize| format!("is in both {} and {}", names[first], names[file]);
            let have = merged.get_mut(&section).expect("a section is merged when its first file is recorded");
            match (have, content) {
                (Value::Object(have), Value::Object(objects)) => {
                    for (key, object) in objects {
                        let origin = (section.clone(), key);
                        if let Some(&first) = key_from.get(&origin) {
                            problems
                                .push_with(|| Problem { path: pointer(&[&origin.0, &origin.1]), message: both(first) });
                        } else {
                            have.insert(origin.1.clone(), object);
                            key_from.insert(origin, file);
                        }
                    }
                }
                (Value::Array(have), Value::Array(entries)) => have.extend(entries),
                (have, content) if shape(have) == shape(&content) => {
                    problems.push(Problem { path: pointer(&[&section]), message: both(first) });
                }
                (have, content) => problems.push(Problem {
                    path: pointer(&[&section]),
                    message: format!(
                        "is {} in {} but {} in {}: a section has one shape in every file",
                        shape(have),
                        names[first],
                        shape(&content),
                        names[file]
                    ),
                }),
            }
        }
    }
    if problems.is_empty() { Ok(Value::Object(merged)) } else { Err(problems) }
}

/// What a value is, as a message names it.
fn shape(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "an object",
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn files(documents: &[(&str, Value)]) -> Vec<(String, Value)> {
        documents.iter().map(|(name, document)| ((*name).to_owned(), document.clone())).collect()
    }

    /// Each problem as `path: message`, sorted: the order of a file's sections is the
    /// map's, which serde_json's features decide.
    fn lines(problems: &Problems) -> Vec<String> {
        let mut lines: Vec<String> =
            problems.listed().iter().map(|problem| format!("{}: {}", problem.path, problem.message)).collect();
        lines.sort();
        lines
    }

    #[test]
    fn disjoint_sections_and_keys_make_one_document() {
        let merged = merge(files(&[
            ("10-sites.yaml", json!({"sites": {"eu-west": {"region": "eu-west-1"}}, "pools": {"gpu-a": {"gpus": 8}}})),
            (
                "20-pools.yml",
                json!({"pools": {"gpu-b": {"gpus": 16}}, "moved": [{"kind": "pool", "from": "a", "to": "b"}]}),
            ),
            (
                "30-more.json",
                json!({"flavors": {"g1": {"pool": "gpu-a"}}, "moved": [{"kind": "pool", "from": "c", "to": "d"}]}),
            ),
        ]))
        .unwrap();
        assert_eq!(
            merged,
            json!({
                "sites": {"eu-west": {"region": "eu-west-1"}},
                "pools": {"gpu-a": {"gpus": 8}, "gpu-b": {"gpus": 16}},
                "flavors": {"g1": {"pool": "gpu-a"}},
                "moved": [{"kind": "pool", "from": "a", "to": "b"}, {"kind": "pool", "from": "c", "to": "d"}],
            })
        );
        // One file is its own document; an empty section merges with anything.
        let one = json!({"pools": {"gpu-a": {}}});
        assert_eq!(merge(files(&[("estate.yaml", one.clone())])).unwrap(), one);
        let with_empty = merge(files(&[("a.json", json!({"pools": {}})), ("b.json", one.clone())])).unwrap();
        assert_eq!(with_empty, one);
    }

    #[test]
    fn the_order_of_files_decides_only_which_is_named_first() {
        let a = ("10-pools.yaml", json!({"pools": {"gpu-a": {"gpus": 8}, "gpu-b": {}}, "sites": {"x": {}}}));
        let b = ("20-more.yaml", json!({"pools": {"gpu-c": {}}, "flavors": {"f": {}}}));
        assert_eq!(merge(files(&[a.clone(), b.clone()])).unwrap(), merge(files(&[b.clone(), a.clone()])).unwrap());

        let clash = ("20-more.yaml", json!({"pools": {"gpu-a": {"gpus": 4}}}));
        let forward = merge(files(&[a.clone(), clash.clone()])).unwrap_err();
        assert_eq!(lines(&forward), ["/pools/gpu-a: is in both 10-pools.yaml and 20-more.yaml"]);
        let backward = merge(files(&[clash, a])).unwrap_err();
        assert_eq!(lines(&backward), ["/pools/gpu-a: is in both 20-more.yaml and 10-pools.yaml"]);
    }

    #[test]
    fn every_key_in_two_files_is_named_with_both() {
        let problems = merge(files(&[
            ("a.yaml", json!({"pools": {"gpu-a": {}, "gpu/b": {}}, "sites": {"eu": {}}})),
            ("b.yaml", json!({"pools": {"gpu-a": {}}, "sites": {"us": {}}})),
            ("c.json", json!({"pools": {"gpu/b": {}}, "sites": {"eu": {}}})),
        ]))
        .unwrap_err();
        assert_eq!(
            lines(&problems),
            [
                "/pools/gpu-a: is in both a.yaml and b.yaml",
                "/pools/gpu~1b: is in both a.yaml and c.json",
                "/sites/eu: is in both a.yaml and c.json",
            ]
        );
    }

    #[test]
    fn a_section_of_two_shapes_or_a_scalar_twice_is_refused() {
        let problems = merge(files(&[
            ("a.yaml", json!({"pools": {"gpu-a": {}}, "moved": [], "version": 1})),
            ("b.yaml", json!({"pools": null, "moved": {"x": {}}, "version": 2})),
        ]))
        .unwrap_err();
        assert_eq!(
            lines(&problems),
            [
                "/moved: is a list in a.yaml but an object in b.yaml: a section has one shape in every file",
                "/pools: is an object in a.yaml but null in b.yaml: a section has one shape in every file",
                "/version: is in both a.yaml and b.yaml",
            ]
        );
    }

    #[test]
    fn no_file_or_a_file_that_is_no_object_is_refused() {
        assert_eq!(lines(&merge(Vec::new()).unwrap_err()), [": no document file (*.yaml, *.yml or *.json)"]);
        let problems =
            merge(files(&[("a.json", json!([{"pools": {}}])), ("b.yaml", json!("pools")), ("c.yaml", json!({}))]))
                .unwrap_err();
        assert_eq!(
            lines(&problems),
            [": a.json is a list, not an object of sections", ": b.yaml is a string, not an object of sections"]
        );
    }

    #[test]
    fn json_and_yaml_by_extension_else_by_content() {
        let expected = json!({"pools": {"gpu-a": {"gpus": 8}}});
        assert_eq!(parse("a.json", r#"{"pools": {"gpu-a": {"gpus": 8}}}"#).unwrap(), expected);
        assert_eq!(parse("a.yaml", "pools:\n  gpu-a: {gpus: 8}\n").unwrap(), expected);
        assert_eq!(parse("a.yml", "---\npools: {gpu-a: {gpus: 8}}\n...\n").unwrap(), expected);
        assert_eq!(parse("/dev/stdin", r#"{"pools": {"gpu-a": {"gpus": 8}}}"#).unwrap(), expected);
        assert_eq!(parse("document", "pools:\n  gpu-a:\n    gpus: 8\n").unwrap(), expected);
        // YAML's flow style is JSON too, but a `.yaml` file is read as YAML.
        assert_eq!(parse("a.yaml", r#"{"pools": {"gpu-a": {"gpus": 8}}}"#).unwrap(), expected);
        // A `.json` file is JSON whatever it starts with.
        let refused = parse("a.json", "pools: {}").unwrap_err();
        assert!(matches!(&refused, FileError::Unparsable { file, .. } if file == "a.json"), "{refused}");
    }

    #[test]
    fn a_key_twice_in_one_file_is_refused_in_json_and_yaml() {
        let json = parse("a.json", r#"{"pools": {"gpu-a": {}, "gpu-a": {}}}"#).unwrap_err();
        assert_eq!(json.to_string(), r#"a.json: /pools/gpu-a: the key "gpu-a" appears twice in one object"#);
        let yaml = parse("a.yaml", "pools:\n  gpu-a: {}\n  gpu-a: {}\n").unwrap_err();
        assert_eq!(yaml.to_string(), "a.yaml: pools: duplicate entry with key \"gpu-a\" at line 2 column 3");
        // Two sections of one name in one YAML file: the second would replace the first.
        let sections = parse("a.yaml", "pools:\n  gpu-a: {}\nsites: {}\npools:\n  gpu-b: {}\n").unwrap_err();
        assert!(sections.to_string().contains("duplicate entry with key \"pools\""), "{sections}");
    }

    #[test]
    fn two_yaml_documents_are_refused_by_name() {
        for text in ["pools: {}\n---\nsites: {}\n", "pools: {}\n---\n", "---\npools: {}\n---\nsites: {}\n"] {
            assert_eq!(
                parse("10-pools.yaml", text),
                Err(FileError::SeveralDocuments { file: "10-pools.yaml".to_owned() }),
                "{text:?}"
            );
        }
        let message = FileError::SeveralDocuments { file: "10-pools.yaml".to_owned() }.to_string();
        assert!(message.starts_with("10-pools.yaml: holds more than one YAML document"), "{message}");
    }

    #[test]
    fn an_empty_file_is_no_document() {
        for (name, text) in [
            ("a.yaml", ""),
            ("a.yaml", "\n  \n"),
            ("a.yml", "# pools come later\n"),
            ("a.yaml", "---\n"),
            ("a.yaml", "~\n"),
            ("a.json", ""),
            ("a.json", " \n"),
            ("a.json", "null"),
            ("document", ""),
        ] {
            assert_eq!(parse(name, text), Err(FileError::Empty { file: name.to_owned() }), "{name} {text:?}");
        }
    }

    #[test]
    fn what_is_not_json_or_yaml_names_the_file_and_where() {
        let broken = parse("pools.yaml", "pools: [unclosed\n").unwrap_err().to_string();
        assert!(broken.starts_with("pools.yaml: ") && broken.contains("line 2"), "{broken}");
        let broken = parse("pools.json", "{\"pools\": ").unwrap_err().to_string();
        assert!(broken.starts_with("pools.json: ") && broken.contains("line 1"), "{broken}");
        // A YAML tag has no JSON value.
        let tagged = parse("pools.yaml", "pools: !secret x\n").unwrap_err().to_string();
        assert!(tagged.starts_with("pools.yaml: "), "{tagged}");
    }

    #[test]
    fn a_saved_plans_sources_may_hold_line_breaks() {
        let text = r#"{"state": {"policies": [{"source": "package p\ndeny := false"}]}}"#;
        assert!(parse("plan.json", text).is_err());
        let reading = Reading { multiline: &["/state/policies/*/source"], budget: usize::MAX };
        assert_eq!(
            parse_with("plan.json", text, &reading).unwrap()["state"]["policies"][0]["source"],
            "package p\ndeny := false"
        );
    }

    #[test]
    fn document_files_are_yaml_yml_and_json_and_not_hidden() {
        for name in ["10-pools.yaml", "sites.yml", "more.json", "a.b.yaml"] {
            assert!(is_document_file(name), "{name}");
        }
        for name in [".hidden.yaml", ".yaml", "README.md", "pools.yaml.bak", "pools.YAML", "pools", "json"] {
            assert!(!is_document_file(name), "{name}");
        }
    }
}
