//! `atoll cluster` as a user runs it: node processes on this machine over UCX (shm and tcp),
//! every protocol on SmallBank and YCSB with every check passing; nodes waiting at
//! `--hosts` addresses (`atoll node --listen` on 127.0.0.1-3) likewise; a node killed with
//! -9, or stopped with SIGSTOP (named by the heartbeat), ends the run with exit 1 naming it
//! and no process left behind; a malformed coordinator message and bad `--hosts` input are
//! refused with exit 2. Built without UCX, each test prints that it was skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
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

/// Whether this build has UCX (the test links the same fabric crate the binary does); the
/// tests that need it print that they were skipped if not.
fn ucx_built() -> bool {
    match atoll_cluster::ucx_available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped: {e}");
            false
        }
    }
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
fn ucx_cluster_sends_each_message_on_its_own_with_coalesce_off_and_says_which_it_did() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    for (coalesce, plan, said) in [
        ("off", "rpc", "each active message sent at once"),
        ("off", "one-sided", "each active message sent at once"),
        ("on", "rpc", "coalesced"),
    ] {
        let json = std::env::temp_dir().join(format!("atoll-coalesce-{coalesce}-{plan}.json"));
        let args = [
            "cluster",
            "--nodes",
            "2",
            "--transport",
            "tcp",
            "bench",
            "--workload",
            "ycsb",
            "--protocol",
            "occ",
            "--plan",
            plan,
            "--duration",
            "0.2",
            "--warmup",
            "0.05",
            "--coroutines",
            "4",
            "-p",
            "records=2000",
            "--coalesce",
            coalesce,
            "--json",
            json.to_str().unwrap(),
        ];
        let (code, out, err) = cluster(&args);
        assert_eq!(code, 0, "{args:?} exited {code}:\n{out}\n{err}");
        assert!(!out.contains("FAIL"), "{args:?}:\n{out}");
        let j = std::fs::read_to_string(&json).unwrap();
        assert!(
            j.contains(said),
            "{args:?}: the JSON's ucx.verbs.messages:\n{j}"
        );
        let _ = std::fs::remove_file(&json);
    }
    // A value it does not know: exit 2, naming it and what is accepted.
    let (code, _, err) = cluster(&["cluster", "--nodes", "2", "bench", "--coalesce", "yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--coalesce yes: accepted are on, off"),
        "{err}"
    );
}

#[test]
fn ucx_cluster_a_deployment_on_machines_starts_its_placements_instances_each_with_its_own_log() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    // One machine of 2 cores: an instance per core (2 processes of 1 thread, each bound to
    // its core and writing its own log) and one per machine (1 process of 2 threads).
    for (granularity, instances) in [("core", 2), ("machine", 1)] {
        let args = [
            "cluster",
            "--transport",
            "shm",
            "bench",
            "--machines",
            "1",
            "--cores-per-socket",
            "2",
            "--granularity",
            granularity,
            "--pin",
            "--instance-log",
            "--workload",
            "micro",
            "-p",
            "kind=update",
            "-p",
            "multisite_fraction=0.5",
            "--protocol",
            "waitdie",
            "--plan",
            "rpc",
            "--replicas",
            "1",
            "--duration",
            "0.2",
            "--warmup",
            "0.05",
        ];
        let (code, out, err) = cluster(&args);
        assert_eq!(code, 0, "{granularity}: exited {code}:\n{out}\n{err}");
        assert!(
            out.contains(&format!("granularity {granularity}")) && !out.contains("FAIL"),
            "{granularity}:\n{out}"
        );
        let log = out
            .lines()
            .find(|l| l.contains("run.instance_log"))
            .unwrap_or_else(|| panic!("{granularity}: no instance log check:\n{out}"));
        assert!(
            log.contains("PASS") && log.contains(&format!("over {instances} nodes' own logs")),
            "{granularity}: {log}"
        );
    }
    // The cluster's node count is the placement's: another one is refused.
    let (code, _, err) = cluster(&[
        "cluster",
        "--nodes",
        "3",
        "--transport",
        "shm",
        "bench",
        "--machines",
        "1",
        "--cores-per-socket",
        "2",
        "--granularity",
        "core",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the deployment's 2 instances"), "{err}");
}

#[test]
fn ucx_cluster_3_processes_run_the_write_skew_probe_and_checkout_with_every_check_passing() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    for (workload, knobs) in [
        ("skew", ["pairs=8", "withdraw_fraction=0.6"]),
        ("checkout", ["products=3000", "orders_max=100000"]),
    ] {
        let mut args = vec![
            "cluster",
            "--nodes",
            "3",
            "--transport",
            "shm",
            "bench",
            "--workload",
            workload,
            "--duration",
            "0.2",
            "--warmup",
            "0.05",
            "--coroutines",
            "4",
        ];
        for k in knobs {
            args.extend(["-p", k]);
        }
        let (code, out, err) = cluster(&args);
        assert_eq!(code, 0, "{args:?} exited {code}:\n{out}\n{err}");
        assert!(
            out.contains(&format!("== {workload} / occ")),
            "{args:?}:\n{out}"
        );
        assert!(!out.contains("FAIL"), "{args:?}:\n{out}");
    }
}

#[test]
fn ucx_cluster_shared_data_memory_compute_and_timestamp_processes_pass_checkout_under_rsi_and_occ()
{
    let _one = serial();
    if !ucx_built() {
        return;
    }
    // RSI: 1 memory + 2 compute processes + the timestamp service's own; OCC has no such
    // role. The two compute processes order on the one memory node, so their order keys
    // must never meet.
    for (protocol, ts_node, nodes, served) in [
        (
            "rsi",
            "own",
            "shared-data 1 memory + 2 compute + 1 ts nodes",
            "compute nodes 0, ts node 0",
        ),
        (
            "occ",
            "",
            "shared-data 1 memory + 2 compute nodes",
            "compute nodes 0\n",
        ),
    ] {
        let role: &[&str] = if ts_node.is_empty() {
            &[]
        } else {
            &["--ts-node", ts_node]
        };
        let head = [
            "cluster",
            "--transport",
            "shm",
            "bench",
            "--architecture",
            "shared-data",
            "--memory-nodes",
            "1",
            "--compute-nodes",
            "2",
        ];
        let rest = [
            "--protocol",
            protocol,
            "--workload",
            "checkout",
            "-p",
            "products=3000",
            "--duration",
            "0.2",
            "--warmup",
            "0.05",
            "--coroutines",
            "2",
        ];
        let args: Vec<&str> = head.iter().chain(role).chain(&rest).copied().collect();
        let (code, out, err) = cluster(&args);
        assert_eq!(code, 0, "{args:?} exited {code}:\n{out}\n{err}");
        assert!(out.contains(nodes), "{args:?}:\n{out}");
        assert!(
            !out.contains("FAIL") && !out.contains("duplicate"),
            "{args:?}:\n{out}"
        );
        assert!(out.contains(served), "{args:?}:\n{out}");
    }
    // The shape names its node count; a --nodes that disagrees is refused.
    let (code, _, err) = cluster(&[
        "cluster",
        "--nodes",
        "3",
        "--transport",
        "shm",
        "bench",
        "--architecture",
        "shared-data",
        "--memory-nodes",
        "1",
        "--compute-nodes",
        "1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("disagrees with cluster --nodes 3"), "{err}");
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
    // Over tcp every one-sided verb is Atoll's own active message, not UCX's emulation.
    for verb in ["read", "write", "cas", "fetch_add"] {
        let how = v["ucx"]["verbs"][verb].as_str().unwrap();
        assert!(
            how.contains("by Atoll's own active message"),
            "{verb}: {how}"
        );
    }
    assert_eq!(v["passed"], true);
}

#[test]
fn ucx_cluster_prints_its_phases_and_the_clusters_progress_as_the_nodes_send_it_and_writes_results()
{
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("atoll-cluster-progress-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (json, results) = (dir.join("r.json"), dir.join("results"));
    let (code, out, err) = cluster(&[
        "cluster",
        "--nodes",
        "2",
        "--transport",
        "shm",
        "bench",
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--progress-interval",
        "0.2",
        "-p",
        "accounts=1000",
        "--json",
        json.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let at = |what: &str| {
        out.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in:\n{out}"))
    };
    assert!(at("[loading]") < at("[running]") && at("[running]") < at("[checking]"));
    // Every interval of the run (warm-up included), each merged from both nodes' workers.
    let lines = out
        .lines()
        .filter(|l| l.contains("committed tx/s  abort rate"))
        .count();
    assert!(lines >= 5, "{lines} progress lines in:\n{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let progress = v["progress"].as_array().unwrap();
    assert_eq!(progress.len(), lines, "{out}");
    let committed: u64 = progress
        .iter()
        .map(|p| p["committed"].as_u64().unwrap())
        .sum();
    assert!(committed > 0 && v["passed"] == true, "{out}");
    let csv = std::fs::read_to_string(results.join("intervals.csv")).unwrap();
    assert_eq!(csv.lines().count(), lines + 1, "{csv}");
    // A bad output path is refused before any node starts.
    let (code, _, err) = cluster(&[
        "cluster",
        "--nodes",
        "2",
        "bench",
        "--json",
        "/nonexistent/dir/r.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--json /nonexistent/dir/r.json"), "{err}");
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
    // Each node streamed its part beside the file as the run went (issue 36, defect 4: the
    // coordinator held every attempt in memory); the parts were joined and removed.
    assert!(
        out.contains("streamed by the nodes as the run went, then joined"),
        "{out}"
    );
    for n in 0..3 {
        assert!(
            !dir.join(format!("h.jsonl.node{n}")).exists(),
            "part {n} left behind"
        );
    }
    let (code, out, err) = cluster(&["check-history", hist.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("serializable"), "{out}\n{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Sends `signal` (a `kill` flag) to node process `victim` and waits up to `RUN_S_MAX` for
/// the coordinator to end: its status, its stderr, and how long it took to end.
fn signal_node(
    coord: &mut Child,
    victim: u32,
    signal: &str,
) -> (std::process::ExitStatus, String, Duration) {
    let sent_at = Instant::now();
    Command::new("kill")
        .args([signal, &victim.to_string()])
        .status()
        .expect("kill");
    let status = loop {
        if let Some(s) = coord.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent_at.elapsed() < Duration::from_secs(RUN_S_MAX),
            "the coordinator did not end after kill {signal} of node process {victim}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let noticed = sent_at.elapsed();
    let mut err = String::new();
    coord
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err, noticed)
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
        let (status, err, noticed) = signal_node(&mut coord, victim, "-9");
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
        (
            vec![
                "cluster",
                "bench",
                "--architecture",
                "shared-data",
                "--colocate",
            ],
            "--colocate is modelled by the simulated and in-process fabrics",
        ),
    ] {
        let (code, _, err) = cluster(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

#[test]
fn ucx_cluster_built_without_ucx_says_how_to_install_it_with_exit_2_after_checking_the_input() {
    if ucx_built() {
        println!("skipped: this build has UCX (ATOLL_UCX=off builds one without; .ci/run does)");
        return;
    }
    let (code, _, err) = cluster(&["cluster", "--nodes", "2", "bench", "--duration", "0.1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("built without UCX") && err.contains("libucx-dev"),
        "{err}"
    );
}

/// Ports tried for one listening node before giving up: a free port can be taken by
/// someone else between our probe and the node's bind, rarely twice in a row.
const PORT_TRIES_MAX: usize = 20;

/// A port on `ip` the kernel just called free.
fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("no free port on {ip}: {e}"))
        .port()
}

/// `atoll node --listen IP:PORT` on a free port, once it said it listens: (child, address).
fn listening_node(ip: &str) -> (Child, String) {
    for _ in 0..PORT_TRIES_MAX {
        let addr = format!("{ip}:{}", free_port(ip));
        let mut child = atoll()
            .args(["node", "--listen", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start atoll node --listen");
        // Its one line, or end of file when it could not listen (and exited).
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        if line.starts_with("listening on") {
            return (child, addr);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("no free port on {ip} in {PORT_TRIES_MAX} tries");
}

/// Waits up to `RUN_S_MAX` for `child` to exit: its exit code and stderr; kills it and
/// fails the test if it does not.
fn exits(mut child: Child, what: &str) -> (i32, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(RUN_S_MAX) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} is still running after {RUN_S_MAX} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (status.code().unwrap_or(-1), err)
}

/// Threads of process `pid` (a listening node has one until a coordinator claims it).
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn ucx_cluster_hosts_3_listening_nodes_on_loopback_addresses_pass_every_check_over_tcp() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let nodes: Vec<(Child, String)> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .into_iter()
        .map(listening_node)
        .collect();
    let hosts: Vec<&str> = nodes.iter().map(|(_, a)| a.as_str()).collect();
    let hosts = hosts.join(",");
    let (code, out, err) = cluster(&[
        "cluster",
        "--hosts",
        &hosts,
        "--transport",
        "tcp",
        "bench",
        "--duration",
        "0.3",
        "--warmup",
        "0.05",
        "--coroutines",
        "4",
        "-p",
        "accounts=2000",
    ]);
    assert_eq!(code, 0, "--hosts {hosts} exited {code}:\n{out}\n{err}");
    assert!(out.contains("ucx         3 processes over tcp"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    let passed = out.lines().filter(|l| l.contains(" PASS ")).count();
    assert!(passed > 0, "no check ran:\n{out}");
    for (i, (child, addr)) in nodes.into_iter().enumerate() {
        let (code, err) = exits(child, &format!("node {i} at {addr}"));
        assert_eq!(code, 0, "node {i} at {addr}: {err}");
    }
    let tput = out
        .lines()
        .find(|l| l.starts_with("throughput"))
        .unwrap_or("");
    println!("--hosts {hosts}: {tput}; {passed} checks PASS");
}

#[test]
fn ucx_cluster_hosts_bad_input_is_one_line_exit_2_naming_the_value_and_leaves_nothing_running() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let one_line_exit_2 = |args: &[&str], named: &str| {
        let (code, _, err) = cluster(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(named), "{args:?} names {named}: {err}");
        err
    };
    // Malformed entries, and --nodes beside --hosts.
    one_line_exit_2(
        &["cluster", "--hosts", "127.0.0.1:7000,nonsense", "bench"],
        "'nonsense'",
    );
    one_line_exit_2(
        &["cluster", "--hosts", "127.0.0.1:99999", "bench"],
        "'127.0.0.1:99999'",
    );
    one_line_exit_2(
        &[
            "cluster",
            "--nodes",
            "3",
            "--hosts",
            "127.0.0.1:7000",
            "bench",
        ],
        "--nodes 3 with --hosts",
    );
    // A port already in use, for a listening node.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().to_string();
    one_line_exit_2(&["node", "--listen", &taken], &taken);
    drop(held);
    // An unreachable host: nothing listens there. The node already claimed is told, exits.
    let (n0, a0) = listening_node("127.0.0.1");
    let nobody = format!("127.0.0.2:{}", free_port("127.0.0.2"));
    let hosts = format!("{a0},{nobody}");
    one_line_exit_2(
        &["cluster", "--hosts", &hosts, "--transport", "tcp", "bench"],
        &nobody,
    );
    let (code, err) = exits(n0, "the node claimed before the unreachable one");
    assert_ne!(code, 0, "{err}");
    // A node already serving another coordinator: that run goes on and passes; this one is
    // refused, and the node it claimed first exits.
    let (n1, a1) = listening_node("127.0.0.1");
    let (n2, a2) = listening_node("127.0.0.2");
    let busy_pid = n1.id();
    let first = atoll()
        .args([
            "cluster",
            "--hosts",
            &a1,
            "--transport",
            "tcp",
            "bench",
            "--duration",
            "3",
            "--warmup",
            "0",
            "-p",
            "accounts=2000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the first coordinator");
    let start = Instant::now();
    while threads_of(busy_pid) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(RUN_S_MAX),
            "the first coordinator never claimed {a1}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let hosts = format!("{a2},{a1}");
    let err = one_line_exit_2(
        &["cluster", "--hosts", &hosts, "--transport", "tcp", "bench"],
        &format!("'{a1}'"),
    );
    assert!(err.contains("already serving"), "{err}");
    let (code, err2) = exits(n2, "the node claimed before the busy one");
    assert_ne!(code, 0, "{err2}");
    let (code, first_err) = exits(first, "the first coordinator");
    assert_eq!(code, 0, "the first run: {first_err}");
    let (code, err1) = exits(n1, "the busy node");
    assert_eq!(code, 0, "the busy node: {err1}");
    println!("refused: {}", err.trim());
}

/// The `--node` id in an `atoll node` process's command line.
fn node_id_of(pid: u32) -> Option<u16> {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmd
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let i = args.iter().position(|a| a == "--node")?;
    args.get(i + 1)?.parse().ok()
}

/// SIGKILLs the processes left when a test fails midway (a stopped node stays forever).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            if std::path::Path::new(&format!("/proc/{p}")).exists() {
                let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
            }
        }
    }
}

#[test]
fn ucx_cluster_a_node_stopped_with_sigstop_is_named_by_the_heartbeat_exit_1_and_no_node_left() {
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let silence = Duration::from_millis(atoll_cluster::HEARTBEAT_SILENCE_MS_MAX);
    // Generous: ten times the heartbeat's limit (a busy machine delays the watcher too).
    let bound = silence * 10;
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
                "60",
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
        let _guard = KillOnDrop(kids.iter().copied().chain([pid]).collect());
        std::thread::sleep(Duration::from_millis(1500));
        let victim = *kids
            .iter()
            .find(|k| node_id_of(**k) == Some(1))
            .expect("node 1 among the children");
        let (status, err, noticed) = signal_node(&mut coord, victim, "-STOP");
        assert_eq!(status.code(), Some(1), "{transport}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("error: node 1 "))
            .unwrap_or_else(|| panic!("{transport}: no error naming node 1:\n{err}"));
        assert!(
            line.contains(&format!("(pid {victim}) hangs")),
            "{transport}: {line}"
        );
        println!(
            "{transport}: the coordinator ended {noticed:?} after kill -STOP (bound {bound:?}, heartbeat silence {silence:?}): {line}"
        );
        assert!(noticed < bound, "{transport}: {noticed:?} >= {bound:?}");
        for k in kids {
            assert!(
                !std::path::Path::new(&format!("/proc/{k}")).exists(),
                "{transport}: node process {k} is left behind"
            );
        }
    }
}

#[test]
fn ucx_cluster_refuses_more_node_processes_than_this_machine_can_run_with_exit_2() {
    if !ucx_built() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bound = cores * atoll_runner::sizing::OVERSUBSCRIPTION_MAX as usize;
    let over = (bound + 1).to_string();
    let threads = (bound / 4 + 1).to_string();
    for (args, named) in [
        (
            vec!["cluster", "--nodes", &over, "bench", "-p", "accounts=1000"],
            format!("--nodes {over} × --threads 1"),
        ),
        (
            vec!["cluster", "--nodes", "1024", "bench", "-p", "accounts=1000"],
            "--nodes 1024 × --threads 1".to_string(),
        ),
        (
            vec![
                "cluster",
                "--nodes",
                "4",
                "bench",
                "--threads",
                &threads,
                "-p",
                "accounts=1000",
            ],
            format!("--nodes 4 × --threads {threads}"),
        ),
    ] {
        let started = Instant::now();
        let (code, _, err) = cluster(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(&named), "{args:?} names {named}: {err}");
        assert!(
            err.contains(&format!("bound of {bound}")) && err.contains("per core"),
            "{args:?} names the bound and why: {err}"
        );
        // Refused up front: no node was started, so it takes no start-up.
        assert!(started.elapsed() < Duration::from_secs(RUN_S_MAX));
        println!("{args:?}: {}", err.trim());
    }
}

/// Issue 36, defect 5: Ctrl-C on `atoll cluster` exited 130 with no partial report, JSON or
/// history; it now gives what it gives on `atoll bench`.
#[test]
fn ucx_cluster_ctrl_c_ends_the_run_with_a_partial_report_json_and_history_and_exit_130() {
    use std::os::unix::process::CommandExt as _;
    let _one = serial();
    if !ucx_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("atoll-cluster-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, hist) = (dir.join("r.json"), dir.join("h.jsonl"));
    let mut coord = Command::new(env!("CARGO_BIN_EXE_atoll"))
        .args([
            "cluster",
            "--nodes",
            "2",
            "--transport",
            "shm",
            "bench",
            "--duration",
            "60",
            "--warmup",
            "0.2",
            "--coroutines",
            "2",
            "--json",
            json.to_str().unwrap(),
            "--history",
            hist.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, as a terminal's foreground job: Ctrl-C reaches it all.
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let group = format!("-{}", coord.id());
    Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .expect("kill");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = coord.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no end after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    coord
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    coord
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{out}\n{err}");
    assert!(
        out.contains("partial     interrupted after"),
        "{out}\n{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["partial"], true);
    assert!(v["summary"]["committed"].as_u64().unwrap() > 0);
    let (code, out, err) = cluster(&["check-history", hist.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    std::fs::remove_dir_all(&dir).ok();
}
