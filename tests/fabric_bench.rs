//! `atoll fabric-bench` as a user runs it: two node processes over UCX shm, every op
//! (READ, WRITE, CAS, FETCH_ADD, RPC, the doorbell of 8) reports a positive latency and
//! rate in its `--json`, no node process is left behind, and bad input exits 2 naming the
//! value. Counts and signs only, never timing thresholds: performance lives in the
//! benchmark's figures. Built without UCX, the run test prints that it was skipped.

use std::process::Command;

fn atoll() -> Command {
    Command::new(env!("CARGO_BIN_EXE_atoll"))
}

/// `atoll node` processes of this build still running (whoever their parent is now: a
/// node its coordinator left behind is adopted by init). Other builds' are not ours.
fn nodes_left() -> Vec<u32> {
    let exe = env!("CARGO_BIN_EXE_atoll");
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{p}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.first() == Some(&exe.as_bytes()) && args.get(1) == Some(&&b"node"[..]) {
            left.push(p);
        }
    }
    left
}

#[test]
fn fabric_bench_over_shm_reports_a_positive_latency_and_rate_for_every_op() {
    let dir = std::env::temp_dir().join(format!("atoll-fabric-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("fb.json");
    let out = atoll()
        .args([
            "fabric-bench",
            "--duration-ms",
            "200",
            "--transport",
            "shm",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .expect("run atoll fabric-bench");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if stderr.contains("built without UCX") {
        println!("skipped: {}", stderr.trim());
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["format"], "atoll-fabric-bench");
    assert_eq!(v["passed"], true, "{stdout}");
    let transports = v["transports"].as_array().unwrap();
    assert_eq!(transports.len(), 1);
    assert_eq!(transports[0]["transport"], "shm");
    let ops = transports[0]["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["read", "write", "cas", "fetch_add", "rpc", "doorbell8"],
        "{stdout}"
    );
    for o in ops {
        let name = o["op"].as_str().unwrap();
        for field in [
            "latency_us_p50",
            "latency_us_p99",
            "rate_ops_per_s",
            "rate_latency_us_p50",
        ] {
            let x = o[field].as_f64().unwrap_or(0.0);
            assert!(x > 0.0, "{name}: {field} = {x}\n{stdout}");
        }
        assert!(o["latency_samples"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(o["failures"], 0, "{name}: {}", o["first_failure"]);
        assert!(o["emulated_by_am"].is_boolean(), "{name}");
        assert!(!o["carried"].as_str().unwrap().is_empty(), "{name}");
    }
    assert_eq!(ops[5]["ops_per_doorbell"], 8);
    // How READ travels: the transport says it is emulated by messages, and the row says so.
    let read_how = transports[0]["verbs"]["read"].as_str().unwrap();
    assert_eq!(
        ops[0]["emulated_by_am"].as_bool().unwrap(),
        read_how.contains("emulated"),
        "{read_how}"
    );
    assert_eq!(
        nodes_left(),
        Vec::<u32>::new(),
        "node processes left behind"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn fabric_bench_refuses_bad_input_with_exit_2_naming_the_value() {
    for (args, expect) in [
        (
            vec!["fabric-bench", "--transport", "ib"],
            "--transport 'ib' is not accepted: expected shm, tcp or both",
        ),
        (
            vec!["fabric-bench", "--duration-ms", "0"],
            "--duration-ms 0 is not accepted",
        ),
    ] {
        let out = atoll().args(&args).output().expect("run atoll");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}
