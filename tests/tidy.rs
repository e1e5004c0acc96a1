//! Tidy checks over the source tree (in the spirit of rust-analyzer's `tidy.rs`): every file
//! says what it is, every crate is on the map, limits read the same way everywhere, and no
//! placeholder ships.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of the workspace except build output.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for top in ["crates", "src", "tests"] {
        walk(&root().join(top), &mut out);
    }
    out.push(root().join("build.rs"));
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[test]
fn tidy_every_rust_file_opens_with_a_module_doc_line() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.starts_with("//!")
        })
        .map(|p| rel(&p))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` first line: {missing:?}"
    );
}

#[test]
fn tidy_every_crate_has_a_codemap_entry_in_architecture_md() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        if e.path().join("Cargo.toml").exists() {
            let heading = format!("### `crates/{}`", e.file_name().to_string_lossy());
            if !arch.contains(&heading) {
                missing.push(heading);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md lacks codemap entries: {missing:?}"
    );
}

/// Words that read as a limit named the other way round (`MAX_X`, `max_x`): limits are
/// `x_max` (`X_MAX` for constants), units and qualifiers last.
fn limit_named_backwards(line: &str) -> Option<String> {
    let bytes = line.as_bytes();
    for (i, _) in line.match_indices("MAX_").chain(line.match_indices("max_")) {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !starts_word {
            continue;
        }
        let word: String = line[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Methods of std (`max_by_key`, ...) are not ours to rename.
        if word.starts_with("max_by") {
            continue;
        }
        return Some(word);
    }
    None
}

#[test]
fn tidy_limits_are_named_x_max() {
    let mut found = Vec::new();
    for p in rust_files() {
        if p.ends_with("tests/tidy.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if let Some(w) = limit_named_backwards(line) {
                found.push(format!("{}:{}: {w}", rel(&p), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "limits named max_x instead of x_max:\n{}",
        found.join("\n")
    );
}

#[test]
fn tidy_no_placeholders_and_every_todo_names_its_issue() {
    let mut found = Vec::new();
    let placeholders = [concat!("todo", "!("), concat!("unimplemented", "!(")];
    for p in rust_files() {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if placeholders.iter().any(|ph| line.contains(ph)) {
                found.push(format!("{}:{}: placeholder", rel(&p), n + 1));
            }
            let todo = concat!("TO", "DO");
            for (i, _) in line.match_indices(todo) {
                if !line[i + todo.len()..].starts_with("(#") {
                    found.push(format!("{}:{}: {todo} without an issue", rel(&p), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn tidy_limit_check_catches_backwards_names() {
    assert_eq!(
        limit_named_backwards("const MAX_LEN: u64 = 1;").as_deref(),
        Some("MAX_LEN")
    );
    assert_eq!(
        limit_named_backwards("let max_width = 3;").as_deref(),
        Some("max_width")
    );
    assert_eq!(limit_named_backwards("const LEN_MAX: u64 = 1;"), None);
    assert_eq!(limit_named_backwards("xs.iter().max_by_key(|x| x)"), None);
    assert_eq!(limit_named_backwards("let batch_size_max = 3;"), None);
}

/// What the repository's root may hold: the manifest, the two documents a newcomer opens
/// first, and the folders. Findings go into `docs/` by topic, not beside the code.
const ROOT_ALLOWED: &[&str] = &[
    ".ci",
    ".git",
    ".gitignore",
    "ARCHITECTURE.md",
    "Cargo.lock",
    "Cargo.toml",
    "README.md",
    "build.rs",
    "crates",
    "docs",
    // The library's example programs: `cargo run --example NAME` finds them here.
    "examples",
    // What the project reproduces, as data `atoll repro` runs.
    "experiments",
    // `atoll repro`'s output (git-ignored).
    "results",
    "scripts",
    "src",
    "target",
    "tests",
];

#[test]
fn tidy_the_root_holds_only_what_its_allowlist_names() {
    let mut extra: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !ROOT_ALLOWED.contains(&n.as_str()))
        .collect();
    extra.sort();
    assert!(
        extra.is_empty(),
        "the repository root holds {extra:?}: put findings in docs/ by topic, or add the entry to ROOT_ALLOWED with a reason"
    );
}

/// Every text file of the tree (source, scripts, docs, manifests), build output aside.
fn text_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') || name == ".ci" {
                    walk(&p, out);
                }
            } else if [".rs", ".md", ".sh", ".toml", ".yml", ".txt"]
                .iter()
                .any(|x| name.ends_with(x))
                || dir.ends_with(".ci")
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    out
}

#[test]
fn tidy_no_notes_files_and_nothing_cites_one() {
    // Spelled in two parts so that this file does not name what it looks for.
    let notes = concat!("NOTES", "-");
    let mut found = Vec::new();
    for p in text_files() {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(notes) || name.starts_with(concat!("NOTES", ".")) {
            found.push(format!(
                "{}: a notes file (findings go into docs/ by topic)",
                rel(&p)
            ));
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.contains(notes) {
                found.push(format!("{}:{}: cites a notes file", rel(&p), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Paths `ARCHITECTURE.md` names in backticks: tokens with a `/` or a file extension the
/// tree uses, without spaces or wildcards.
fn architecture_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        // Odd chunks are inside backticks.
        if i % 2 == 0
            || chunk.contains(char::is_whitespace)
            || chunk.contains(['*', '<', '{', ':', '('])
        {
            continue;
        }
        let looks_like_path = (chunk.contains('/') && !chunk.starts_with('-'))
            || [".rs", ".md", ".toml", ".sh"]
                .iter()
                .any(|x| chunk.ends_with(x));
        if looks_like_path && !chunk.starts_with("http") && !chunk.starts_with("../") {
            out.push(chunk.trim_end_matches('/').to_string());
        }
    }
    out
}

#[test]
fn tidy_architecture_md_names_only_paths_that_exist() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let missing: Vec<String> = architecture_paths(&arch)
        .into_iter()
        .filter(|p| !root().join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn tidy_architecture_path_check_finds_paths_in_backticks() {
    let text = "see `crates/fabric/src/lib.rs` and `README.md`, not `--nodes 3` or `x + y`";
    assert_eq!(
        architecture_paths(text),
        vec![
            "crates/fabric/src/lib.rs".to_string(),
            "README.md".to_string()
        ]
    );
}

/// Lines beyond which a function (outside tests) fails tidy, unless it is listed in
/// [`LONG_FUNCTIONS`] at its current length.
const FUNCTION_LINES_MAX: usize = 100;

/// The functions over [`FUNCTION_LINES_MAX`] lines today, each at the length it has: a ratchet.
/// An entry may only shrink: a listed function that grew fails, one that shrank must have its
/// entry lowered (or removed once it is within the limit), and no new one may join.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("crates/check/src/lib.rs", "build", 110),
    ("crates/check/src/lib.rs", "snapshot_checks", 115),
    ("crates/check/src/lib.rs", "vector_snapshot_checks", 124),
    ("crates/check/src/lib.rs", "to_adya", 106),
    ("crates/fabric-sim/src/lib.rs", "run", 132),
    ("crates/fabric-ucx/src/transport.rs", "poll", 118),
    ("crates/history/src/lib.rs", "from_json", 136),
    ("crates/protocols/src/mvcc/coord.rs", "read", 127),
    ("crates/protocols/src/namdb/mover.rs", "move_batch", 133),
    ("crates/protocols/src/rsi/participant.rs", "serve", 109),
    (
        "crates/protocols/src/waitdie/coord.rs",
        "lock_wait_die",
        104,
    ),
    ("crates/runner/src/calibrate.rs", "calibrate", 137),
    ("crates/runner/src/sizing.rs", "size", 102),
    ("crates/txn/src/handler.rs", "serve", 109),
    ("crates/txn/src/stages.rs", "write_back", 120),
    ("src/main.rs", "plan_all", 101),
];

/// `(file, function, lines)` of every function in the non-test sources: from its `fn` line to
/// its closing brace, test modules (`#[cfg(test)]`), `tests/`, `benches/` and `examples/`
/// left out.
fn function_lengths() -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for p in rust_files() {
        let r = rel(&p);
        if r.starts_with("tests/")
            || ["/tests/", "/benches/", "/examples/"]
                .iter()
                .any(|d| r.contains(d))
        {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (name, lines) in functions_in(&text) {
            out.push((r.clone(), name, lines));
        }
    }
    out
}

/// A line with string and char literals and `//` comments blanked, so braces in them do not
/// count.
fn code_of(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            '\'' => {
                // A char literal (`'{'`, `'\n'`) or a lifetime (`'a`): skip the literal only.
                let rest: String = chars.clone().take(3).collect();
                let mut r = rest.chars();
                match (r.next(), r.next(), r.next()) {
                    (Some('\\'), _, _) => {
                        while let Some(d) = chars.next() {
                            if d == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\''), _) => {
                        chars.next();
                        chars.next();
                    }
                    _ => out.push(c),
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// The name of the function a line opens, if it opens one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        let qualifier = w.starts_with("pub")
            || ["const", "async", "unsafe", "extern", "\"C\"", "default"].contains(&w);
        if w == "fn" {
            let name: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!name.is_empty()).then_some(name);
        }
        if !qualifier {
            return None;
        }
    }
    None
}

/// `(name, lines)` of each function with a body in `text`, test modules left out.
fn functions_in(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<String> = text.lines().map(code_of).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if text
            .lines()
            .nth(i)
            .is_some_and(|l| l.trim() == "#[cfg(test)]")
        {
            i = block_end(&lines, i + 1).map_or(lines.len(), |e| e + 1);
            continue;
        }
        if let Some(name) = fn_name(&lines[i]) {
            if let Some(end) = block_end(&lines, i) {
                out.push((name, end - i + 1));
            }
        }
        i += 1;
    }
    out
}

/// The line closing the block that opens at or after line `start`; `None` for a declaration
/// without a body (a `;` before any `{`).
fn block_end(lines: &[String], start: usize) -> Option<usize> {
    let mut depth = 0i64;
    let mut opened = false;
    for (j, l) in lines.iter().enumerate().skip(start) {
        for c in l.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened => return None,
                _ => {}
            }
            if opened && depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

#[test]
fn tidy_functions_stay_short_and_the_long_ones_only_shrink() {
    let mut problems = Vec::new();
    // The longest of the functions a file names alike (methods of two impls): what the
    // ratchet holds to.
    let mut longest: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for (file, name, lines) in function_lengths() {
        let l = longest.entry((file, name)).or_default();
        *l = (*l).max(lines);
    }
    let found: Vec<(String, String, usize)> =
        longest.into_iter().map(|((f, n), l)| (f, n, l)).collect();
    // The counts the docs quote (`cargo test --test tidy -- --nocapture`).
    let over = |n: usize| found.iter().filter(|(_, _, l)| *l > n).count();
    eprintln!(
        "functions over 70 lines: {}, over 100: {}, over 150: {}",
        over(70),
        over(FUNCTION_LINES_MAX),
        over(150)
    );
    for (file, name, lines) in &found {
        let listed = LONG_FUNCTIONS
            .iter()
            .find(|(f, n, _)| f == file && n == name);
        match listed {
            None if *lines > FUNCTION_LINES_MAX => problems.push(format!(
                "{file}: fn {name} has {lines} lines, over {FUNCTION_LINES_MAX}: split it"
            )),
            Some((_, _, max)) if lines > max => problems.push(format!(
                "{file}: fn {name} grew to {lines} lines (listed at {max}): split it"
            )),
            Some((_, _, max)) if lines < max => problems.push(format!(
                "{file}: fn {name} shrank to {lines} lines: lower its LONG_FUNCTIONS entry from {max}{}",
                if *lines <= FUNCTION_LINES_MAX { " (or remove it: it is within the limit)" } else { "" }
            )),
            _ => {}
        }
    }
    for (file, name, _) in LONG_FUNCTIONS {
        if !found.iter().any(|(f, n, _)| f == file && n == name) {
            problems.push(format!(
                "{file}: fn {name} is listed in LONG_FUNCTIONS but no longer exists: remove it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn tidy_function_lengths_count_from_fn_to_its_closing_brace() {
    let text = "//! x\nfn a() {\n    let s = \"}\";\n    let c = '{';\n}\n\
                pub(crate) fn b<'a>(x: &'a str) -> &'a str {\n    x\n}\n\
                fn decl();\n#[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\n";
    assert_eq!(
        functions_in(text),
        vec![("a".to_string(), 4), ("b".to_string(), 3)]
    );
}

/// Where docs/cli.md holds the table of the protocol families' knobs, generated from their
/// declarations ([`family_knob_table`]).
const KNOB_TABLE_BEGIN: &str =
    "<!-- family-knobs:begin (generated by tests/tidy.rs; ATOLL_BLESS=1 rewrites it) -->";
const KNOB_TABLE_END: &str = "<!-- family-knobs:end -->";

/// The table of every knob and node role a protocol family declares: its flag and key, the
/// families, what it accepts, its default and what it does.
fn family_knob_table() -> String {
    use atoll_txn::KnobKind;
    let mut t = String::from(
        "| flag (TOML key) | families | accepts | default | what it does |\n| --- | --- | --- | --- | --- |\n",
    );
    for (spec, families) in atoll_protocols::ProtocolKind::all_knobs() {
        let names: Vec<&str> = families.iter().map(|p| p.name()).collect();
        let (accepts, default) = match spec.kind {
            KnobKind::Flag => ("flag".to_string(), "off".to_string()),
            KnobKind::Number { default, .. } => (spec.accepted(), default.to_string()),
            KnobKind::Choice { default, .. } => (
                spec.accepted().replace(", ", " \\| "),
                format!("`{default}`"),
            ),
        };
        t += &format!(
            "| `--{}` (`{}`) | {} | {accepts} | {default} | {} |\n",
            spec.flag(),
            spec.name,
            names.join(", "),
            spec.help
        );
    }
    for (role, families) in atoll_protocols::ProtocolKind::all_roles() {
        let names: Vec<&str> = families.iter().map(|p| p.name()).collect();
        let several = role.count_knob.map_or(String::new(), |k| {
            format!(
                "; with several (`--{}`), the i-th on memory node i, or each on a node of its own",
                k.replace('_', "-")
            )
        });
        t += &format!(
            "| `{}` (`{}`) | {} | memory \\| own | `memory` | node role, shared-data: the {} on memory node 0 (`memory`) or a node of its own after the compute nodes (`own`){several} |\n",
            role.flag(),
            role.key(),
            names.join(", "),
            role.what
        );
    }
    t
}

#[test]
fn tidy_docs_knob_table_is_the_families_declarations() {
    let path = root().join("docs/cli.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (text.find(KNOB_TABLE_BEGIN), text.find(KNOB_TABLE_END)) else {
        panic!("docs/cli.md lacks the markers {KNOB_TABLE_BEGIN} ... {KNOB_TABLE_END}");
    };
    let start = b + KNOB_TABLE_BEGIN.len() + 1;
    let want = family_knob_table();
    if text[start..e] == want {
        return;
    }
    if std::env::var_os("ATOLL_BLESS").is_some() {
        let new = format!("{}{want}{}", &text[..start], &text[e..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    panic!(
        "docs/cli.md's knob table is not the families' declarations (ATOLL_BLESS=1 cargo test --test tidy rewrites it); expected:\n{want}"
    );
}
