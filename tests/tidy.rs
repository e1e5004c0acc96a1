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
