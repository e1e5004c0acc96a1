//! Embeds what a report needs to name the build: the git commit (with `-dirty` when the
//! tree has changes), the profile, the target and the enabled features. Never fails: without
//! git or a `.git`, the commit is "unknown" (or `ATOLL_GIT_COMMIT` when set, for builds from
//! an exported tree).

use std::process::Command;

/// What a report says when the commit cannot be known.
const UNKNOWN: &str = "unknown";

/// Paths whose changes can change `git status` or the commit; the build script reruns when
/// one changes. Not `.` itself: a target directory inside the tree would rerun it every build.
const WATCHED: &[&str] = &[
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
    "src",
    "crates",
    "tests",
    "scripts",
    "README.md",
    "ARCHITECTURE.md",
];

/// Runs git with `args` in the package directory; `None` if git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn commit() -> String {
    if let Ok(c) = std::env::var("ATOLL_GIT_COMMIT") {
        if !c.trim().is_empty() {
            return c.trim().to_string();
        }
    }
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty()) else {
        return UNKNOWN.into();
    };
    // `--no-optional-locks`: status must not refresh (rewrite) the index, which this script
    // watches: after a fresh checkout that made every later cargo command rerun the script
    // and rebuild the binary and every test that runs it, once per profile.
    match git(&["--no-optional-locks", "status", "--porcelain"]) {
        Some(s) if s.is_empty() => head,
        Some(_) => format!("{head}-dirty"),
        // Status unknown: do not claim the tree was clean.
        None => format!("{head}-dirty?"),
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=ATOLL_GIT_COMMIT");
    for p in WATCHED.iter().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
    // HEAD, the branch it points to and the index live in the git directory, which for a
    // worktree is elsewhere (`.git` is then a file naming it).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        if let Some(common) = common {
            // A watched path that does not exist reruns the script on every build: watch
            // only what is there (a branch's ref may live in packed-refs alone).
            let refs = [
                branch.map(|b| format!("{common}/{b}")),
                Some(format!("{common}/packed-refs")),
            ];
            for f in refs.into_iter().flatten() {
                if std::path::Path::new(&f).exists() {
                    println!("cargo:rerun-if-changed={f}");
                }
            }
        }
    }
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| UNKNOWN.into());
    let target = std::env::var("TARGET").unwrap_or_else(|_| UNKNOWN.into());
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase()))
        .collect();
    features.sort();
    println!("cargo:rustc-env=ATOLL_GIT_COMMIT={}", commit());
    println!("cargo:rustc-env=ATOLL_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=ATOLL_BUILD_TARGET={target}");
    println!(
        "cargo:rustc-env=ATOLL_BUILD_FEATURES={}",
        features.join(",")
    );
}
