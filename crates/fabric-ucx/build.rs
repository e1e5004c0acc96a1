//! Finds libucx through pkg-config. When UCX 1.13 or newer is installed the crate links
//! ucp/uct/ucs and is built with `--cfg atoll_ucx`; otherwise (or with `ATOLL_UCX=off`) it
//! still compiles, against stand-ins for the UCX functions that nothing can reach, because
//! every constructor then returns `UcxError::NotBuilt`. Never fails the build.

use std::path::PathBuf;
use std::process::Command;

/// The UCX the committed bindings (`src/sys.rs`) were generated against.
const UCX_VERSION_LEAST: &str = "1.13";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(atoll_ucx)");
    println!("cargo:rerun-if-env-changed=ATOLL_UCX");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=src/sys.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wanted = std::env::var("ATOLL_UCX").map_or(true, |v| v != "off");
    if wanted && ucx_found() {
        println!("cargo:rustc-cfg=atoll_ucx");
        for dir in pkg_config(&["--libs-only-L", "ucx"])
            .split_whitespace()
            .filter_map(|f| f.strip_prefix("-L"))
        {
            println!("cargo:rustc-link-search=native={dir}");
        }
        for lib in ["ucp", "uct", "ucs"] {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    } else {
        if wanted {
            println!(
                "cargo:warning=UCX {UCX_VERSION_LEAST}+ not found by pkg-config: atoll-fabric-ucx is built without it (apt-get install libucx-dev)"
            );
        }
        let sys = std::fs::read_to_string("src/sys.rs").expect("src/sys.rs is committed");
        std::fs::write(out.join("sys_absent.rs"), stand_ins(&sys)).expect("OUT_DIR is writable");
    }
}

fn ucx_found() -> bool {
    Command::new("pkg-config")
        .args(["--atleast-version", UCX_VERSION_LEAST, "ucx"])
        .status()
        .is_ok_and(|s| s.success())
}

fn pkg_config(args: &[&str]) -> String {
    Command::new("pkg-config")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The bindings with every `extern "C"` declaration turned into a Rust function that says UCX
/// is absent, and the inner attributes dropped (the text is `include!`d). Nothing calls them:
/// without UCX no `Context` can be made, and every other handle comes from one.
fn stand_ins(sys: &str) -> String {
    let mut out = String::new();
    let mut rest = sys;
    while let Some(start) = rest.find("extern \"C\" {") {
        out.push_str(&rest[..start]);
        let body_start = start + "extern \"C\" {".len();
        let Some(len) = rest[body_start..].find("\n}") else {
            break;
        };
        let body = &rest[body_start..body_start + len];
        for decl in body.split_inclusive(';') {
            let decl = decl.trim();
            if let Some(sig) = decl
                .strip_prefix("pub fn ")
                .and_then(|d| d.strip_suffix(';'))
            {
                out.push_str(
                    "#[allow(unused_variables, clippy::too_many_arguments)]\npub unsafe fn ",
                );
                out.push_str(sig);
                out.push_str(" { crate::ucx_absent() }\n");
            }
        }
        rest = &rest[body_start + len + 2..];
    }
    out.push_str(rest);
    out.lines()
        .filter(|l| !l.starts_with("#![") && !l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}
