//! `atoll cluster` as a user runs it: node processes on this machine over UCX (shm and tcp),
//! every protocol on SmallBank and YCSB with every check passing; a node killed with -9 ends
//! the run with exit 1 naming it and no process left behind; a malformed coordinator message
//! is refused with exit 2. Built without UCX, each test prints that it was skipped.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a short cluster run may take here (start-up, 0.3 s of run, checks), with margin
/// for a busy two-core machine.
const RUN_S_MAX: u64 = 120;

/// Cluster runs one at a time: each keeps busy one core per node, and two at once on a
/// small machine would only time each other out.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn atoll() -> Command {
    Command::new(env!("CARGO_BIN_EXE_atoll"))
}

/// Whether this build has UCX: `atoll cluster` says how to install it, exit 2, if not.
fn ucx_built() -> bool {
    let out = atoll()
        .args(["cluster", "--nodes", "1", "bench", "--duration", "-1"])
        .output()
        .expect("run atoll");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("built without UCX") {
        println!("skipped: {}", err.trim());
        return false;
    }
    true
}

/// Runs a cluster to completion; (exit code, stdout, stderr).
fn cluster(args: &[&str]) -> (i32, String, String) {
    let out = atoll().args(args).output().expect("run atoll");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `atoll node` processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the fields after the last ')'.
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let ppid = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        if ppid == Some(pid) {
            kids.push(p);
        }
    }
    kids
}

fn every_protocol_passes(transport: &str) {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    for workload in ["smallbank", "ycsb"] {
        for protocol in ["nowait", "waitdie", "occ", "mvcc", "sundial"] {
            for plan in ["one-sided", "rpc"] {
                let args = [
                    "cluster",
                    "--nodes",
                    "3",
                    "--transport",
                    transport,
                    "bench",
                    "--workload",
                    workload,
                    "--protocol",
                    protocol,
                    "--plan",
                    plan,
                    "--duration",
                    "0.2",
                    "--warmup",
                    "0.05",
                    "--coroutines",
                    "4",
                    "-p",
                    if workload == "ycsb" {
                        "records=2000"
                    } else {
                        "accounts=2000"
                    },
                ];
                let (code, out, err) = cluster(&args);
                assert_eq!(code, 0, "{args:?} exited {code}:\n{out}\n{err}");
                assert!(out.contains("ucx fabric"), "{args:?}:\n{out}");
                assert!(!out.contains("FAIL"), "{args:?}:\n{out}");
                assert!(
                    out.contains(&format!("ucx         3 processes over {transport}")),
                    "{args:?}:\n{out}"
                );
            }
        }
    }
}

#[test]
fn ucx_cluster_3_processes_over_shm_pass_every_check_for_every_protocol_and_plan() {
    every_protocol_passes("shm");
}

#[test]
fn ucx_cluster_3_processes_over_tcp_pass_every_check_for_every_protocol_and_plan() {
    every_protocol_passes("tcp");
}

#[test]
fn ucx_cluster_json_names_the_transport_and_how_each_verb_travels() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("atoll-cluster-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let (code, out, err) = cluster(&[
        "cluster",
        "--nodes",
        "2",
        "--transport",
        "tcp",
        "bench",
        "--duration",
        "0.2",
        "--warmup",
        "0.05",
        "-p",
        "accounts=1000",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["config"]["fabric"], "ucx");
    assert_eq!(v["ucx"]["transport"], "tcp");
    assert_eq!(v["ucx"]["processes"], 2);
    let read = v["ucx"]["verbs"]["read"].as_str().unwrap();
    assert!(
        read.contains("emulated by UCX over active messages (rma_am)"),
        "{read}"
    );
    assert_eq!(v["passed"], true);
}

#[test]
fn ucx_cluster_history_holds_every_nodes_attempts_in_one_file_and_checks_serializable() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("atoll-cluster-hist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hist = dir.join("h.jsonl");
    let (code, out, err) = cluster(&[
        "cluster",
        "--nodes",
        "3",
        "--transport",
        "shm",
        "bench",
        "--workload",
        "ycsb",
        "--protocol",
        "mvcc",
        "--plan",
        "rpc",
        "--coroutines",
        "4",
        "-p",
        "records=2000",
        "--duration",
        "0.2",
        "--warmup",
        "0.05",
        "--history",
        hist.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    // One header, then attempts of every coordinator of every node (3 nodes x 4).
    let text = std::fs::read_to_string(&hist).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["format"], "atoll-history", "{header}");
    let mut coords = std::collections::BTreeSet::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v.get("format").is_none(), "a second header: {l}");
        coords.insert(v["coord"].as_u64().unwrap());
    }
    assert_eq!(coords.len(), 12, "coordinators in the history: {coords:?}");
    let (code, out, err) = cluster(&["check-history", hist.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("serializable"), "{out}\n{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ucx_cluster_a_node_killed_with_signal_9_ends_the_run_with_exit_1_naming_it_and_no_child_left() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    for transport in ["tcp", "shm"] {
        let mut coord = atoll()
            .args([
                "cluster",
                "--nodes",
                "3",
                "--transport",
                transport,
                "bench",
                "--duration",
                "30",
                "--warmup",
                "0",
                "-p",
                "accounts=2000",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start atoll cluster");
        let pid = coord.id();
        // Wait until the three nodes run (they joined: the run is under way).
        let start = Instant::now();
        let mut kids = Vec::new();
        while kids.len() < 3 {
            assert!(
                start.elapsed() < Duration::from_secs(RUN_S_MAX),
                "the nodes did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
            kids = children_of(pid);
        }
        std::thread::sleep(Duration::from_millis(1500));
        let victim = kids[1];
        let killed_at = Instant::now();
        Command::new("kill")
            .args(["-9", &victim.to_string()])
            .status()
            .expect("kill -9");
        let status = loop {
            if let Some(s) = coord.try_wait().unwrap() {
                break s;
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(RUN_S_MAX),
                "the coordinator did not end after a node was killed"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let noticed = killed_at.elapsed();
        let mut err = String::new();
        coord
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(1), "{transport}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("error: node "))
            .unwrap_or_else(|| panic!("{transport}: no error naming a node:\n{err}"));
        assert!(
            line.contains("was killed by signal 9"),
            "{transport}: {line}"
        );
        assert!(
            noticed < Duration::from_secs(10),
            "{transport}: {noticed:?}"
        );
        for k in kids {
            assert!(
                !std::path::Path::new(&format!("/proc/{k}")).exists(),
                "{transport}: node process {k} is left behind"
            );
        }
        println!("{transport}: the coordinator ended {noticed:?} after kill -9: {line}");
    }
}

#[test]
fn ucx_node_a_malformed_coordinator_message_is_refused_with_exit_2() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut node = atoll()
        .args(["node", "--coordinator", &addr, "--node", "0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start atoll node");
    let (mut s, _) = listener.accept().unwrap();
    // Its hello, then a frame that is not a message.
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut hello = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut hello).unwrap();
    assert!(String::from_utf8_lossy(&hello).contains("\"hello\""));
    let junk = b"{\"msg\":\"launch\",\"rockets\":3}";
    s.write_all(&(junk.len() as u32).to_le_bytes()).unwrap();
    s.write_all(junk).unwrap();
    let status = node.wait().unwrap();
    let mut err = String::new();
    node.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("malformed message from the coordinator"),
        "{err}"
    );
    assert!(err.contains("launch"), "names the bad value: {err}");
}

#[test]
fn ucx_cluster_refuses_bad_input_with_exit_2() {
    for (args, expect) in [
        (
            vec!["cluster", "--transport", "ib", "bench"],
            "unknown transport 'ib'",
        ),
        (
            vec!["cluster", "--nodes", "3", "bench", "--nodes", "2"],
            "disagrees",
        ),
        (vec!["cluster", "bench", "--fabric", "sim"], "--fabric sim"),
        (vec!["cluster", "bench", "--plan", "all"], "--plan all"),
        (vec!["cluster", "floor"], "cluster runs 'bench'"),
    ] {
        let (code, _, err) = cluster(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}
