//! The conformance kit against the built-in reference driver and deliberately broken
//! drivers, through the library and the `adaptortest` binary.

use std::path::PathBuf;
use std::process::Command;

use adaptor::cassette::Cassette;
use adaptor_integration_tests::*;
use adaptortest::check::{CheckOptions, Status, check_driver};

/// Drivers installed as built-ins (each has a README with its report and committed cassettes).
const BUILTIN_DRIVERS: &[&str] = &["reference", "claude", "codex", "acp", "cursor", "codebuddy"];

fn cassette_dir() -> PathBuf {
    cassette_dir_of("reference")
}

fn cassette_dir_of(driver: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../drivers/{driver}/cassettes"))
}

fn cassettes() -> Vec<(String, Cassette)> {
    cassettes_of("reference")
}

fn cassettes_of(driver: &str) -> Vec<(String, Cassette)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cassette_dir_of(driver))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "committed cassettes missing");
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                Cassette::load(&p).expect("cassette loads"),
            )
        })
        .collect()
}

fn failed(report: &adaptortest::Report) -> Vec<String> {
    report
        .results
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| r.id.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_driver_passes_every_clause_over_its_cassettes() {
    let options = CheckOptions {
        cassettes: cassettes(),
        ..CheckOptions::default()
    };
    let report = check_driver(&driver_path("reference"), &options).await;
    assert!(!report.failed(), "{}", report.render_text());
    for id in [
        "DRV-02", "CFG-03", "CAP-01", "EVT-01", "RUN-04", "RSP-01", "SES-04", "FLT-01", "FLT-04",
        "FLT-07",
    ] {
        assert_eq!(
            report.get(id).map(|r| r.status),
            Some(Status::Pass),
            "{id}: {}",
            report.render_text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cli_drivers_pass_every_clause_over_their_recorded_cassettes() {
    for driver in ["claude", "codex", "acp", "cursor", "codebuddy"] {
        let options = CheckOptions {
            cassettes: cassettes_of(driver),
            ..CheckOptions::default()
        };
        let report = check_driver(&driver_path(driver), &options).await;
        assert!(!report.failed(), "{driver}: {}", report.render_text());
        assert_eq!(
            report.get("SES-04").map(|r| r.status),
            Some(Status::Pass),
            "{driver}: {}",
            report.render_text()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_driver_fails_exactly_its_clause() {
    // An unclosed tool call and invented usage are also caught by the host, which fails the
    // run (HST-01).
    for (defect, clauses) in [
        ("unclosed-tool", &["EVT-11", "HST-01"][..]),
        ("valid-checkpoint-on-failure", &["RSP-01"]),
        ("raw-text", &["RSP-03"]),
        ("chunk-notice", &["FLT-01"]),
        ("invented-usage", &["USG-01", "HST-01"]),
        ("accept-unknown-fields", &["CFG-03"]),
        ("ignore-resume", &["SES-04"]),
        // A driver that traps on output traps under every fault injection too.
        (
            "trap-on-output",
            &[
                "RUN-00", "FLT-01", "FLT-02", "FLT-03", "FLT-04", "FLT-05", "FLT-06",
            ],
        ),
    ] {
        let options = CheckOptions {
            config: Some(serde_json::json!({ "defect": defect })),
            cassettes: cassettes(),
            ..CheckOptions::default()
        };
        let report = check_driver(&test_driver_path("broken"), &options).await;
        assert_eq!(
            failed(&report),
            clauses.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>(),
            "{defect}:\n{}",
            report.render_text()
        );
    }
    let options = CheckOptions {
        cassettes: cassettes(),
        skip_faults: true,
        ..CheckOptions::default()
    };
    let report = check_driver(&test_driver_path("unstable"), &options).await;
    assert_eq!(
        failed(&report),
        vec!["DRV-02".to_owned()],
        "{}",
        report.render_text()
    );
}

fn adaptortest() -> Command {
    let exe = bin_dir().join("adaptortest");
    assert!(
        exe.is_file(),
        "{} is missing: build it first (`./x.sh test` does)",
        exe.display()
    );
    Command::new(exe)
}

#[test]
fn the_binary_reports_and_exits_by_verdict() {
    let ok = adaptortest()
        .args([
            "check",
            &driver_path("reference").display().to_string(),
            "--no-faults",
            "--cassette",
        ])
        .arg(cassette_dir())
        .output()
        .unwrap();
    assert_exit(&ok, 0);
    let text = String::from_utf8(ok.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("EVT-01") && l.contains("pass")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("FLT-01") && l.contains("skip")),
        "{text}"
    );

    let bad = adaptortest()
        .args([
            "check",
            &test_driver_path("broken").display().to_string(),
            "--config",
            r#"{"defect":"raw-text"}"#,
            "--no-faults",
            "--json",
            "--cassette",
        ])
        .arg(cassette_dir())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    let failures: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "fail")
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(failures, vec!["RSP-03"]);
}

/// `adaptortest replay --driver reference.wasm --json EXTRA… FILE`, parsed.
fn replay_doc(extra: &[&str], file: &std::path::Path) -> serde_json::Value {
    let out = adaptortest()
        .args([
            "replay",
            "--driver",
            &driver_path("reference").display().to_string(),
            "--json",
        ])
        .args(extra)
        .arg(file)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn replay_json_has_the_documented_shape() {
    let doc = replay_doc(&[], &cassette_dir().join("happy.json"));
    assert!(
        doc["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["kind"].is_string())
    );
    let o = &doc["outcome"];
    assert_eq!(o["text"], "Reference reply: Hello reference");
    assert_eq!(o["summary"], "Answered in 1 turn(s).");
    for key in [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
    ] {
        assert!(o["usage"].get(key).is_some(), "usage.{key} missing");
    }
    assert!(
        o["usage"]["cache_write_tokens"].is_null(),
        "absent is null, not zero"
    );
    assert_eq!(o["usage"]["cache_read_tokens"], 0);
    assert_eq!(o["model"], "reference-1");
    assert_eq!(o["checkpoint"]["valid"], true);
    assert!(
        o["checkpoint"]["resume_id"]
            .as_str()
            .unwrap()
            .starts_with("ref-")
    );
    assert!(
        o["transcript"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["kind"].is_string())
    );
    assert!(o["failure"].is_null());

    let doc = replay_doc(&[], &cassette_dir().join("fail.json"));
    assert_eq!(doc["outcome"]["failure"]["reason"], "agent_error");
    assert_eq!(
        doc["outcome"]["failure"]["message"],
        "reference failure requested"
    );
    assert_eq!(doc["outcome"]["checkpoint"]["valid"], false);
}

#[test]
fn a_plain_stdout_capture_is_a_cassette_too() {
    let dir = tempfile::tempdir().unwrap();
    let happy = Cassette::load(&cassette_dir().join("happy.json")).unwrap();
    let stdout = dir.path().join("stdout.jsonl");
    std::fs::write(&stdout, happy.bytes(adaptor::StreamKind::Stdout)).unwrap();
    let stderr = dir.path().join("stderr.txt");
    std::fs::write(&stderr, "a warning\n").unwrap();
    let stderr_arg = stderr.display().to_string();
    let doc = replay_doc(&["--exit-code", "2", "--stderr", &stderr_arg], &stdout);
    assert_eq!(doc["outcome"]["text"], "Reference reply: Hello reference");
    assert_eq!(doc["outcome"]["exit"]["code"], 2);
    assert_eq!(
        doc["outcome"]["checkpoint"]["valid"], false,
        "exit 2 is never a clean success"
    );
    assert!(
        doc["outcome"]["transcript"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "stderr")
    );
}

#[test]
fn adaptor_run_record_writes_a_replayable_cassette() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"state_dir": state.path().display().to_string()}).to_string();
    let out = Command::new(bin_dir().join("adaptor"))
        .args(["run", "--config", &config, "--record"])
        .arg(dir.path())
        .arg("record me")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .next()
        .expect("a cassette")
        .path();
    let cassette = Cassette::load(&file).unwrap();
    assert_eq!(cassette.prompt.as_deref(), Some("record me"));
    assert_eq!(cassette.exit.code, Some(0));
    assert!(
        cassette.config.as_ref().unwrap().get("command").is_none(),
        "local paths are not recorded"
    );
    assert_eq!(cassette.bytes(adaptor::StreamKind::Stdin), b"record me");
    let doc = replay_doc(&[], &file);
    assert_eq!(doc["outcome"]["text"], "Reference reply: record me");
}

#[test]
fn each_builtin_driver_readme_carries_its_current_report() {
    for name in BUILTIN_DRIVERS {
        let readme =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../drivers/{name}/README.md"));
        let text = std::fs::read_to_string(&readme).unwrap();
        let begin = "<!-- adaptortest report: begin -->\n";
        let section = text
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once("<!-- adaptortest report: end -->"))
            .map(|(s, _)| s)
            .expect("report markers");
        let out = adaptortest()
            .args([
                "report",
                &driver_path(name).display().to_string(),
                "--cassette",
            ])
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../drivers/{name}/cassettes")),
            )
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "adaptortest report {name} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            section,
            String::from_utf8(out.stdout).unwrap(),
            "{} is stale: run ./x.sh reports",
            readme.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_negatives_are_checked() {
    // The reference driver streams reasoning; a descriptor that denies it must be caught.
    let happy = Cassette::load(&cassette_dir().join("happy.json")).unwrap();
    let driver = adaptor::Driver::from_file(driver_path("reference")).unwrap();
    let replayed = adaptortest::replay_cassette(&driver, &happy, &Default::default())
        .await
        .unwrap();
    assert!(
        adaptortest::check_declared_negatives(&replayed.events, driver.descriptor()).is_empty()
    );
    let mut denying = driver.descriptor().clone();
    denying.streaming.reasoning = false;
    let violations = adaptortest::check_declared_negatives(&replayed.events, &denying);
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].clause, "EVT-12");
}
