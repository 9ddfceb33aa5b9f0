//! `fleet plan --format markdown`: a plan as a pull-request comment (SPEC §20.2) — what
//! it does in its first line, then blocked changes, policy verdicts, removals and the
//! other changes, the plan hash, and the marker a bot finds its own comment by. Every
//! value from the document is escaped, and the comment stays under GitHub's limit.

use serde_json::Value;

use crate::client::{escape_controls, printable};
use crate::render::{approval_required, has, plural};

/// The longest comment this writes, in characters: GitHub refuses one over 65,536.
pub const LIMIT: usize = 65_000;

/// A list longer than this many lines is folded into a `<details>`.
const FOLDED_OVER: usize = 20;

/// Where a plan was made: its comment says so, and its marker names the tenant.
pub struct Target<'a> {
    pub tenant: &'a str,
    pub server: &'a str,
}

/// The marker a bot finds its own comment by, to update it in place.
pub fn marker(tenant: &str) -> String {
    // A tenant name is a name (`[a-z0-9-]`); anything else could end the comment.
    let tenant: String =
        tenant.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    format!("<!-- fleet-plan tenant={tenant} -->")
}

/// The lists of a comment, in the order it shows them; `Cuttable` ones lose lines from
/// their end when the comment would be too long.
struct List {
    title: &'static str,
    body: Body,
    /// What a line is called, one and many: `["removal", "removals"]`.
    noun: [&'static str; 2],
    /// How many lines of the list were left out.
    left_out: usize,
}

enum Body {
    /// Lines of a `diff` block: the plan's own text lines (`+ pool gpu-b: create`).
    Diff(Vec<String>),
    /// Rows of the verdicts' table, each already escaped for its cells.
    Table(&'static str, Vec<String>),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Diff(lines) | Body::Table(_, lines) => lines.len(),
        }
    }

    fn truncate(&mut self, keep: usize) {
        match self {
            Body::Diff(lines) | Body::Table(_, lines) => lines.truncate(keep),
        }
    }

    /// How many lines to keep so that those dropped from the end free at least
    /// `characters` (at least one is dropped).
    fn keeping_all_but(&self, characters: usize) -> usize {
        let lines = match self {
            Body::Diff(lines) | Body::Table(_, lines) => lines,
        };
        let mut freed = 0;
        for (index, line) in lines.iter().enumerate().rev() {
            freed += line.chars().count() + 1;
            if freed >= characters {
                return index;
            }
        }
        0
    }
}

/// The plan as a comment of at most [`LIMIT`] characters.
pub fn render(plan: &Value, target: &Target) -> String {
    let mut lists = lists(plan);
    let mut comment = compose(plan, target, &lists);
    // Cut the lists in the order they may lose lines: creates and updates first, the
    // other changes next; removals, verdicts and blocked changes only when they alone
    // would not fit (GitHub would refuse the comment whole).
    for index in [3, 4, 2, 1, 0] {
        while comment.chars().count() > LIMIT && lists[index].body.len() > 0 {
            let over = comment.chars().count() - LIMIT;
            let list = &mut lists[index];
            // Drop enough lines to cover the excess and the note saying so, at once.
            let keep = list.body.keeping_all_but(over + 200);
            list.left_out += list.body.len() - keep;
            list.body.truncate(keep);
            comment = compose(plan, target, &lists);
        }
    }
    comment
}

/// The plan's lists, in the comment's order: blocked, verdicts, removals, creates and
/// updates, and the other changes (renames, restores).
fn lists(plan: &Value) -> [List; 5] {
    let blocked: Vec<&Value> = plan["blocked"].as_array().into_iter().flatten().collect();
    let is_blocked =
        |change: &Value| blocked.iter().any(|entry| entry["kind"] == change["kind"] && entry["key"] == change["key"]);
    let (mut removals, mut writes, mut others) = (Vec::new(), Vec::new(), Vec::new());
    for change in plan["changes"].as_array().into_iter().flatten().filter(|change| !is_blocked(change)) {
        let line = printable(&change["text"]);
        match change["action"].as_str() {
            Some("delete" | "archive") => removals.push(line),
            Some("create" | "update") => writes.push(line),
            _ => others.push(line),
        }
    }
    let blocked_lines = blocked
        .iter()
        .map(|entry| {
            let field = entry["field"].as_str().map(|field| format!(" {}", escape_controls(field))).unwrap_or_default();
            format!(
                "! {} {}{field}: {}",
                printable(&entry["kind"]),
                printable(&entry["key"]),
                printable(&entry["reason"])
            )
        })
        .collect();
    let verdicts = plan["policy"]["verdicts"].as_array().into_iter().flatten().map(verdict_row).collect();
    let list = |title, body, noun| List { title, body, noun, left_out: 0 };
    [
        list("Blocked", Body::Diff(blocked_lines), ["blocked change", "blocked changes"]),
        list("Policy verdicts", Body::Table(VERDICTS_HEADER, verdicts), ["verdict", "verdicts"]),
        list("Removals", Body::Diff(removals), ["removal", "removals"]),
        list("Changes", Body::Diff(writes), ["create or update", "creates and updates"]),
        list("Other changes", Body::Diff(others), ["rename or restore", "renames and restores"]),
    ]
}

const VERDICTS_HEADER: &str = "| verdict | policy | object | message |\n|---|---|---|---|";

/// `| **deny** (mandatory) | `gpus` | pool `gpu-a` | asks for 128 GPUs |`.
fn verdict_row(verdict: &Value) -> String {
    let rule = printable(&verdict["rule"]);
    let level = printable(&verdict["level"]);
    let binding = level != "advisory";
    let shown = match (rule.as_str(), binding) {
        ("deny", true) => format!("**deny** ({})", text(&level)),
        ("require_approval", true) => format!("**needs approval** ({})", text(&level)),
        ("warn", _) => "warn".to_owned(),
        (other, _) => format!("warn ({} {})", text(&level), text(&other.replace('_', " "))),
    };
    let object = match (verdict["kind"].as_str(), verdict["key"].as_str()) {
        (Some(kind), Some(key)) => format!("{} {}", text(kind), code(key)),
        (Some(only), None) | (None, Some(only)) => code(only),
        (None, None) => String::new(),
    };
    format!(
        "| {shown} | {} | {object} | {} |",
        code(&printable(&verdict["policy"])),
        text(&printable(&verdict["message"]))
    )
}

/// The whole comment, from its lists as they are now.
fn compose(plan: &Value, target: &Target, lists: &[List; 5]) -> String {
    let mut out = format!("{}\n", headline(plan));
    for list in lists {
        let count = list.body.len() + list.left_out;
        if count == 0 {
            continue;
        }
        out.push_str(&format!("\n#### {} ({count})\n\n", list.title));
        let folded = list.body.len() > FOLDED_OVER;
        if folded {
            out.push_str(&format!("<details><summary>{}</summary>\n\n", counted(count, list.noun)));
        }
        match &list.body {
            Body::Diff(lines) if !lines.is_empty() => out.push_str(&diff_block(lines)),
            Body::Table(header, rows) if !rows.is_empty() => {
                out.push_str(header);
                out.push('\n');
                for row in rows {
                    out.push_str(row);
                    out.push('\n');
                }
            }
            _ => {}
        }
        if folded {
            out.push_str("\n</details>\n");
        }
        if list.left_out > 0 {
            out.push_str(&format!(
                "\n_{} left out to keep this comment under {LIMIT} characters: `fleet plan` shows them all._\n",
                counted(list.left_out, list.noun)
            ));
        }
    }
    let left_alone = plan["leftAlone"].as_array().map_or(0, Vec::len);
    if left_alone > 0 {
        out.push_str(&format!(
            "\n{} not in the document {} left alone; `--prune` would remove {}.\n",
            plural(left_alone, "live object"),
            if left_alone == 1 { "is" } else { "are" },
            if left_alone == 1 { "it" } else { "them" }
        ));
    }
    if let Some(why) = approval_required(plan) {
        out.push_str(&format!("\n**Approval required**: {why}; propose it (`fleet propose`) for review.\n"));
    }
    out.push_str(&format!(
        "\nPlan hash {} · tenant {} · server {}\n",
        code(&printable(&plan["planHash"])),
        code(target.tenant),
        code(&without_userinfo(target.server))
    ));
    out.push_str(&format!("\n{}\n", marker(target.tenant)));
    out
}

/// `**fleet plan** — 3 to create, 1 to update, 1 to delete; 1 blocked; 1 needs approval`.
pub fn headline(plan: &Value) -> String {
    let summary = &plan["summary"];
    let number = |name: &str| summary[name].as_u64().unwrap_or_default();
    let mut does: Vec<String> =
        ["create", "update", "delete"].iter().map(|action| format!("{} to {action}", number(action))).collect();
    for action in ["archive", "restore", "rename"] {
        if number(action) > 0 {
            does.push(format!("{} to {action}", number(action)));
        }
    }
    let mut line = if has(plan, "changes") {
        format!("**fleet plan** — {}", does.join(", "))
    } else {
        "**fleet plan** — no changes".to_owned()
    };
    let blocked = plan["blocked"].as_array().map_or(0, Vec::len);
    if blocked > 0 {
        line.push_str(&format!("; {blocked} blocked"));
    }
    if number("denied") > 0 {
        line.push_str(&format!("; {} denied", number("denied")));
    }
    match number("approvalRequired") {
        0 if plan["approvalRequired"] == "deployment" => line.push_str("; needs approval"),
        0 => {}
        1 => line.push_str("; 1 needs approval"),
        many => line.push_str(&format!("; {many} need approval")),
    }
    line
}

/// A fenced `diff` block whose fence is longer than any run of backticks in `lines`, so
/// that no line can close it.
fn diff_block(lines: &[String]) -> String {
    let longest = lines.iter().map(|line| longest_run(line, '`')).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let mut out = format!("{fence}diff\n");
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
    out
}

/// `text` as an inline code span that nothing in it can end, safe in a table cell.
fn code(text: &str) -> String {
    let text = escape_controls(text).replace('|', "\\|");
    let ticks = "`".repeat(longest_run(&text, '`') + 1);
    // A span that starts or ends with a backtick needs a space between it and the ticks.
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// `text` as prose: every character that Markdown or HTML gives a meaning shown as
/// itself, and no line break, so that it stays in its paragraph or table cell.
fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in escape_controls(text).chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if c.is_ascii_punctuation() => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// `1 removal`, `3 removals`.
fn counted(count: usize, [one, many]: [&str; 2]) -> String {
    if count == 1 { format!("1 {one}") } else { format!("{count} {many}") }
}

fn longest_run(text: &str, of: char) -> usize {
    let (mut longest, mut run) = (0, 0);
    for character in text.chars() {
        run = if character == of { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// A server address without the user and password it may carry.
fn without_userinfo(server: &str) -> String {
    match server.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/').map_or(rest, |(authority, _)| authority).rsplit_once('@') {
            Some((_, host)) => {
                let path = rest.split_once('/').map(|(_, path)| format!("/{path}")).unwrap_or_default();
                format!("{scheme}://{host}{path}")
            }
            None => server.to_owned(),
        },
        None => server.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TARGET: Target = Target { tenant: "acme", server: "https://fleet.example.com" };

    fn change(action: &str, key: &str) -> Value {
        let mark = match action {
            "create" => "+",
            "delete" | "archive" => "-",
            _ => "~",
        };
        json!({"action": action, "kind": "pool", "key": key, "text": format!("{mark} pool {key}: {action}")})
    }

    fn plan(changes: Vec<Value>, blocked: Vec<Value>, verdicts: Vec<Value>) -> Value {
        let count = |action: &str| changes.iter().filter(|change| change["action"] == action).count();
        json!({
            "summary": {"create": count("create"), "update": count("update"), "delete": count("delete"),
                        "archive": count("archive"), "restore": 0, "unchanged": 0, "blocked": blocked.len(),
                        "denied": verdicts.iter().filter(|v| v["rule"] == "deny").count(), "warnings": 0,
                        "approvalRequired": verdicts.iter().filter(|v| v["rule"] == "require_approval").count()},
            "changes": changes, "blocked": blocked, "calls": [], "leftAlone": [],
            "policy": {"verdicts": verdicts, "digest": "sha256:0"}, "planHash": "sha256:abc"
        })
    }

    #[test]
    fn the_first_line_says_what_the_plan_does_and_the_sections_keep_their_order() {
        let plan = plan(
            vec![
                change("create", "a"),
                change("create", "b"),
                change("create", "c"),
                change("update", "d"),
                change("delete", "e"),
                change("update", "x"),
            ],
            vec![json!({"kind": "pool", "key": "x", "field": "class", "reason": "class is immutable"})],
            vec![json!({"policy": "review", "level": "mandatory", "rule": "require_approval", "message": "big"})],
        );
        let comment = render(&plan, &TARGET);
        assert_eq!(
            comment.lines().next().unwrap(),
            "**fleet plan** — 3 to create, 2 to update, 1 to delete; 1 blocked; 1 needs approval"
        );
        let at = |text: &str| comment.find(text).unwrap_or_else(|| panic!("{text:?} not in\n{comment}"));
        assert!(at("#### Blocked (1)") < at("#### Policy verdicts (1)"));
        assert!(at("#### Policy verdicts (1)") < at("#### Removals (1)"));
        assert!(at("#### Removals (1)") < at("#### Changes (4)"));
        assert!(at("! pool x class: class is immutable") < at("#### Policy verdicts"));
        assert!(at("| **needs approval** (mandatory) | `review` |  | big |") > 0);
        assert!(comment.ends_with("\n<!-- fleet-plan tenant=acme -->\n"), "{comment}");
        assert!(at("Plan hash `sha256:abc` · tenant `acme` · server `https://fleet.example.com`") > 0);
        // The blocked change is listed once, under Blocked.
        assert_eq!(comment.matches("pool x").count(), 1, "{comment}");
    }

    #[test]
    fn a_list_over_twenty_lines_is_folded() {
        let short =
            render(&plan((0..20).map(|n| change("create", &format!("p{n}"))).collect(), vec![], vec![]), &TARGET);
        assert!(!short.contains("<details>"), "{short}");
        let long =
            render(&plan((0..21).map(|n| change("create", &format!("p{n}"))).collect(), vec![], vec![]), &TARGET);
        assert!(long.contains("<details><summary>21 creates and updates</summary>\n\n```diff\n"), "{long}");
        assert!(long.contains("```\n\n</details>\n"), "{long}");
    }

    #[test]
    fn no_changes_says_so() {
        assert_eq!(headline(&plan(vec![], vec![], vec![])), "**fleet plan** — no changes");
    }

    /// What a comment renders as: its HTML (tags, comments) and the text of its
    /// paragraphs, cells, code spans and code blocks, as a CommonMark parser with
    /// GitHub's tables reads it.
    fn rendered(comment: &str) -> (Vec<String>, Vec<String>, Vec<usize>) {
        use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
        let (mut html, mut texts, mut cells_per_row, mut cells) = (Vec::new(), Vec::<String>::new(), Vec::new(), 0);
        // A parser splits a text at its escapes: the pieces of one text are joined.
        let mut in_text = false;
        for event in Parser::new_ext(comment, Options::ENABLE_TABLES) {
            let is_text = matches!(event, Event::Text(_));
            match event {
                Event::Html(tag) | Event::InlineHtml(tag) => html.push(tag.trim().to_owned()),
                Event::Text(text) if in_text => texts.last_mut().into_iter().for_each(|last| last.push_str(&text)),
                Event::Text(text) | Event::Code(text) => texts.push(text.to_string()),
                Event::Start(Tag::TableCell) => cells += 1,
                Event::End(TagEnd::TableRow | TagEnd::TableHead) => cells_per_row.push(std::mem::take(&mut cells)),
                _ => {}
            }
            in_text = is_text;
        }
        (html, texts, cells_per_row)
    }

    #[test]
    fn hostile_values_render_as_text() {
        let hostile = "x`</details><script>alert(1)</script> | *b* [l](http://e) ```\n# h <!-- fleet-plan tenant=z -->";
        let mut hostile_change = change("update", "gpu");
        hostile_change["text"] = json!(format!("~ pool gpu: update (labels {{}} -> {{\"k\":\"{hostile}\"}})"));
        let mut hostile_removal = change("delete", "old");
        hostile_removal["text"] = json!(format!("- pool old: delete ({hostile})"));
        let plan = plan(
            vec![hostile_change, hostile_removal],
            vec![json!({"kind": "pool", "key": hostile, "field": hostile, "reason": hostile})],
            vec![json!({"policy": hostile, "level": "advisory", "rule": "warn", "kind": "pool", "key": hostile,
                        "message": hostile})],
        );
        let comment = render(&plan, &Target { tenant: "a--b>", server: "https://user:secret@h.example/x" });
        let (html, texts, cells_per_row) = rendered(&comment);
        // The only HTML is the comment's own: no value opened or closed a tag.
        assert_eq!(html, ["<!-- fleet-plan tenant=a--b_ -->"], "{comment}");
        // Every value is whole in one text: a cell, a code span or a line of a block.
        let escaped = escape_controls(hostile);
        let whole = |text: &String| text.contains(&escaped);
        assert_eq!(texts.iter().filter(|text| whole(text)).count(), 6, "{texts:#?}\n{comment}");
        assert_eq!(cells_per_row, [4, 4], "a header and one row of four cells: {comment}");
        assert!(comment.contains("server `https://h.example/x`"), "no password shown: {comment}");
        assert!(comment.ends_with("<!-- fleet-plan tenant=a--b_ -->\n"), "the marker is the last line");
    }

    #[test]
    fn folded_lists_render_as_details() {
        let changes = (0..25).map(|n| change("delete", &format!("p{n}"))).collect();
        let (html, _, _) = rendered(&render(&plan(changes, vec![], vec![]), &TARGET));
        assert_eq!(html[0], "<details><summary>25 removals</summary>");
        assert_eq!(html[1], "</details>");
    }

    #[test]
    fn code_spans_outlast_the_backticks_in_them() {
        assert_eq!(code("gpu-a"), "`gpu-a`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`a``"), "``` `a`` ```");
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("a\nb"), "`a\\u{a}b`");
    }

    #[test]
    fn thirty_thousand_changes_fit_cutting_creates_and_updates_first() {
        let mut changes: Vec<Value> = (0..30_000).map(|n| change("create", &format!("pool-{n:05}"))).collect();
        changes.extend((0..300).map(|n| change("delete", &format!("gone-{n:03}"))));
        let verdicts = (0..50)
            .map(|n| json!({"policy": format!("p{n}"), "level": "advisory", "rule": "warn", "message": "m"}))
            .collect();
        let comment = render(&plan(changes, vec![], verdicts), &TARGET);
        assert!(comment.chars().count() <= LIMIT, "{}", comment.chars().count());
        assert!(comment.chars().count() > LIMIT - 1_000, "it uses the room it has: {}", comment.chars().count());
        for n in 0..300 {
            assert!(comment.contains(&format!("- pool gone-{n:03}: delete\n")), "removal {n} kept");
        }
        assert_eq!(comment.matches("| warn |").count(), 50);
        let shown = comment.matches("+ pool pool-").count();
        assert!(shown > 1_000 && shown < 30_000, "{shown}");
        assert!(comment.contains(&format!("_{} creates and updates left out to keep this", 30_000 - shown)));
        assert!(comment.contains("#### Changes (30000)"), "the count is the plan's");
        assert!(comment.ends_with("<!-- fleet-plan tenant=acme -->\n"));
    }
}
