//! `adaptor run --thread` and `adaptor threads list|show|fork|archive` with the SQLite store:
//! every call is a separate host process, so resuming here is resuming across processes.

use std::process::{Command, Output, Stdio};

use adaptor_integration_tests::*;
use serde_json::Value;

struct Fixture {
    state: tempfile::TempDir,
    ws: tempfile::TempDir,
    db: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Self {
            state: tmp(),
            ws: tmp(),
            db: tmp(),
        }
    }

    fn store(&self) -> String {
        self.db.path().join("threads.sqlite3").display().to_string()
    }

    fn adaptor(&self) -> Command {
        let mut cmd = adaptor_cli();
        // Never touch the user's default store from a test.
        cmd.env("ADAPTOR_THREAD_DB", self.db.path().join("default.sqlite3"));
        cmd
    }

    fn run_args(&self) -> Vec<String> {
        vec![
            "--config".into(),
            serde_json::json!({"state_dir": self.state.path().display().to_string()}).to_string(),
            "--cwd".into(),
            self.ws.path().display().to_string(),
            "--store".into(),
            self.store(),
            "--json".into(),
        ]
    }

    /// `adaptor run --thread KEY … PROMPT`: the final result line.
    fn run(&self, key: &str, extra: &[&str], prompt: &str) -> (Output, Value) {
        let out = self
            .adaptor()
            .arg("run")
            .args(["--thread", key])
            .args(self.run_args())
            .args(extra)
            .arg(prompt)
            .output()
            .unwrap();
        let result = last_json(&out);
        (out, result)
    }

    fn records(&self, args: &[&str]) -> Vec<Value> {
        let out = self
            .adaptor()
            .arg("threads")
            .args(args)
            .args(["--store", &self.store(), "--json"])
            .output()
            .unwrap();
        assert_exit(&out, 0);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON record per line"))
            .collect()
    }
}

fn last_json(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_thread_resumes_across_processes_and_is_listed() {
    let f = Fixture::new();
    let (out, first) = f.run("ticket-42", &[], "first");
    assert_exit(&out, 0);
    assert_eq!(first["text"], "Reference reply: first");
    assert_eq!(first["thread"]["key"], "ticket-42");
    assert_eq!(first["thread"]["start"]["kind"], "new");
    let record_id = first["thread"]["record_id"].as_str().unwrap().to_owned();

    let (out, second) = f.run("ticket-42", &[], "second");
    assert_exit(&out, 0);
    assert_eq!(
        second["text"],
        "Reference reply (turn 2, previously: first): second"
    );
    assert_eq!(second["thread"]["start"]["kind"], "resumed");
    assert_eq!(second["thread"]["record_id"], record_id.as_str());

    let listed = f.records(&["list"]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["key"], "ticket-42");
    assert_eq!(listed[0]["id"], record_id.as_str());
    assert_eq!(listed[0]["status"], "active");
    assert_eq!(listed[0]["turns"], 2);
    assert_eq!(listed[0]["driver"], "reference");
    assert_eq!(
        listed[0]["component"].as_str().map(str::len),
        Some(64),
        "the record names the component that wrote it"
    );
    assert_eq!(
        listed[0]["state"]["resume_id"],
        second["checkpoint"]["resume_id"]
    );
}

#[test]
fn fork_archive_and_show() {
    let f = Fixture::new();
    let (out, _) = f.run("chat", &[], "hello");
    assert_exit(&out, 0);

    let out = f
        .adaptor()
        .args(["threads", "fork", "chat", "--thread", "chat-alt"])
        .args(f.run_args())
        .arg("branch")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let forked = last_json(&out);
    assert_eq!(
        forked["text"],
        "Reference reply (turn 2, previously: hello): branch"
    );
    assert_eq!(forked["thread"]["start"]["kind"], "forked");
    assert_eq!(forked["thread"]["start"]["parent_key"], "chat");
    assert_eq!(f.records(&["list"]).len(), 2);

    // Forking onto a key that exists is refused before anything runs.
    let out = f
        .adaptor()
        .args(["threads", "fork", "chat", "--thread", "chat-alt"])
        .args(f.run_args())
        .arg("again")
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));

    let out = f
        .adaptor()
        .args(["threads", "archive", "chat", "--store", &f.store()])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let shown = f.records(&["show", "chat"]);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["status"], "archived");
    assert_eq!(f.records(&["list"]).len(), 1, "only chat-alt is active");
    assert_eq!(f.records(&["list", "--all"]).len(), 2);

    // After archiving, the key starts a new session.
    let (out, next) = f.run("chat", &[], "fresh");
    assert_exit(&out, 0);
    assert_eq!(next["text"], "Reference reply: fresh");
    assert_eq!(next["thread"]["start"]["kind"], "new");
    assert_eq!(f.records(&["show", "chat"]).len(), 2);
}

#[test]
fn resume_only_missing_and_flag_conflicts_are_setup_errors() {
    let f = Fixture::new();
    let (out, _) = f.run("ghost", &["--resume-only"], "hi");
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("thread \"ghost\" has no active checkpoint"),
        "{}",
        stderr(&out)
    );
    // There is no `--resume ID`: a made-up session id is not a resume point, and the thread
    // key is the one identity a caller names (clap usage error).
    let out = f
        .adaptor()
        .args(["run", "--resume", "ref-00", "hi"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("--resume"), "{}", stderr(&out));
    // --accept-checkpoints-from takes a sha256.
    let out = f
        .adaptor()
        .args([
            "run",
            "--thread",
            "a",
            "--accept-checkpoints-from",
            "not-a-hash",
            "hi",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("sha256 in hex"), "{}", stderr(&out));
    let out = f
        .adaptor()
        .args(["threads", "show", "nothing-here", "--store", &f.store()])
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let out = f
        .adaptor()
        .args(["threads", "archive", "nothing-here", "--store", &f.store()])
        .output()
        .unwrap();
    assert_exit(&out, 1);
}

#[test]
fn the_default_store_is_the_sqlite_file_named_by_the_environment() {
    let f = Fixture::new();
    let default_db = f.db.path().join("default.sqlite3");
    let run = |prompt: &str| {
        f.adaptor()
            .args(["run", "--thread", "k", "--json", "--cwd"])
            .arg(f.ws.path())
            .arg("--config")
            .arg(serde_json::json!({"state_dir": f.state.path().display().to_string()}).to_string())
            .arg(prompt)
            .output()
            .unwrap()
    };
    let out = run("one");
    assert_exit(&out, 0);
    assert!(
        default_db.is_file(),
        "the store was created at $ADAPTOR_THREAD_DB"
    );
    let out = run("two");
    assert_exit(&out, 0);
    assert_eq!(last_json(&out)["thread"]["start"]["kind"], "resumed");
    let out = f
        .adaptor()
        .args(["threads", "list", "--json"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn the_readable_view_says_how_the_run_related_to_the_thread() {
    let f = Fixture::new();
    let run = |prompt: &str| {
        f.adaptor()
            .args(["run", "--thread", "view", "--store", &f.store(), "--cwd"])
            .arg(f.ws.path())
            .arg("--config")
            .arg(serde_json::json!({"state_dir": f.state.path().display().to_string()}).to_string())
            .arg(prompt)
            .output()
            .unwrap()
    };
    let out = run("one");
    assert_exit(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("thread \"view\""),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The provider forgets the session: the CLI announces the fallback.
    std::fs::remove_dir_all(f.state.path()).unwrap();
    std::fs::create_dir(f.state.path()).unwrap();
    let out = run("two");
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains("the stored session was rejected"),
        "{}",
        stderr(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fresh session after a rejected resume"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_host_killed_mid_run_frees_its_thread_after_the_lease_and_keeps_the_healthy_checkpoint() {
    let f = Fixture::new();
    let (out, first) = f.run("crash", &[], "first");
    assert_exit(&out, 0);
    // A second host process starts a long turn, then dies with SIGKILL (no cleanup at all).
    let mut doomed = f
        .adaptor()
        .arg("run")
        .args(["--thread", "crash", "--lease-ttl", "1"])
        .args(f.run_args())
        .arg("[[sleep 60000]] never finishes")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it is running: its first JSON line is `run_started` (so it holds the lease).
    let mut reader = std::io::BufReader::new(doomed.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert!(line.contains("\"run_started\""), "{line}");
    // While it holds the lease, another host is refused at once (exit 1, busy).
    let (out, _) = f.run("crash", &["--lease-ttl", "1"], "meanwhile");
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("is busy"), "{}", stderr(&out));
    unsafe { libc::kill(doomed.id() as i32, libc::SIGKILL) };
    doomed.wait().unwrap();
    // Once the lease lapses the thread runs again and resumes the last healthy checkpoint.
    let mut attempts = 0;
    let resumed = loop {
        attempts += 1;
        let (out, result) = f.run("crash", &[], "after the crash");
        if out.status.code() == Some(0) {
            break result;
        }
        assert!(stderr(&out).contains("is busy"), "{}", stderr(&out));
        assert!(attempts < 200, "the lease never lapsed");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(resumed["thread"]["start"]["kind"], "resumed");
    assert_eq!(resumed["thread"]["record_id"], first["thread"]["record_id"]);
    assert_eq!(
        resumed["text"],
        "Reference reply (turn 2, previously: first): after the crash"
    );
}
