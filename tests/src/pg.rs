//! A PostgreSQL server for tests, and a fresh database per test.
//!
//! Owns the private test cluster: with `ADAPTOR_TEST_POSTGRES_URL` set, that server is used;
//! otherwise one cluster per test binary is created (`initdb`) in a temporary directory and
//! run (`postgres`, a direct child, never daemonised) on `127.0.0.1` and a free port. The
//! binaries come from Debian's `postgresql` package (`/usr/lib/postgresql/<version>/bin`,
//! installed by `./x.sh test`); without them every PostgreSQL test fails saying so. Must
//! not: outlive the test binary (the server gets `PR_SET_PDEATHSIG`=SIGKILL and is stopped
//! by an `atexit` handler that also removes its directory), listen beyond loopback, or share
//! a database between tests ([`test_database`] creates one per call).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable naming an existing server to use instead of a private cluster.
pub const URL_ENV: &str = "ADAPTOR_TEST_POSTGRES_URL";

/// How long a new cluster may take to accept connections.
const START_LIMIT: Duration = Duration::from_secs(90);

/// How long the `atexit` handler waits for a graceful stop before SIGKILL.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// Connection parameters of the server, without a database name.
#[derive(Debug, Clone)]
struct Server {
    /// `key=value` pairs (already quoted) for host, port, user and password.
    params: Vec<(String, String)>,
    /// The database to connect to for `CREATE DATABASE` / `DROP DATABASE`.
    admin_db: String,
}

impl Server {
    fn conninfo(&self, dbname: &str) -> String {
        let mut out = String::new();
        for (k, v) in &self.params {
            out.push_str(&format!("{k}={} ", quote(v)));
        }
        out.push_str(&format!("dbname={}", quote(dbname)));
        out
    }
}

/// Quote a conninfo value (`'…'` with `\'` and `\\`).
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The private cluster's process and directory, for the `atexit` handler.
static CLUSTER: Mutex<Option<(Child, PathBuf)>> = Mutex::new(None);

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

fn server() -> &'static Server {
    match SERVER.get_or_init(|| match std::env::var(URL_ENV) {
        Ok(url) if !url.is_empty() => external(&url),
        _ => start_private_cluster(),
    }) {
        Ok(server) => server,
        Err(message) => panic!("test PostgreSQL server unavailable: {message}"),
    }
}

fn external(url: &str) -> Result<Server, String> {
    use tokio_postgres::config::Host;
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("{URL_ENV}={url:?} does not parse: {e}"))?;
    let mut params = Vec::new();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        params.push(("host".into(), hosts.join(",")));
    }
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    if !ports.is_empty() {
        params.push(("port".into(), ports.join(",")));
    }
    if let Some(user) = config.get_user() {
        params.push(("user".into(), user.to_owned()));
    }
    if let Some(password) = config.get_password() {
        let password = String::from_utf8(password.to_vec())
            .map_err(|_| format!("{URL_ENV}: the password is not UTF-8"))?;
        params.push(("password".into(), password));
    }
    Ok(Server {
        params,
        admin_db: config.get_dbname().unwrap_or("postgres").to_owned(),
    })
}

/// `initdb` and `postgres` of the newest PostgreSQL under `root` (Debian:
/// `/usr/lib/postgresql/<version>/bin`).
fn find_binaries(root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let missing = format!(
        "PostgreSQL server binaries (initdb, postgres) not found under {}/*/bin: install \
         Debian's `postgresql` package (`apt-get install -y --no-install-recommends \
         postgresql`; ./x.sh test does it) or set {URL_ENV}",
        root.display()
    );
    let entries = std::fs::read_dir(root).map_err(|_| missing.clone())?;
    let mut best: Option<(u32, PathBuf)> = None;
    for entry in entries.flatten() {
        let Some(version) = entry
            .file_name()
            .to_str()
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        let bin = entry.path().join("bin");
        if bin.join("initdb").is_file()
            && bin.join("postgres").is_file()
            && best.as_ref().is_none_or(|(v, _)| version > *v)
        {
            best = Some((version, bin));
        }
    }
    let (_, bin) = best.ok_or(missing)?;
    Ok((bin.join("initdb"), bin.join("postgres")))
}

/// The uid/gid to run the server as: `postgres` when we are root (it refuses root), else
/// ourselves.
fn server_identity() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam with a valid C string; the result is read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(
            "running as root and there is no `postgres` system user to run the \
                    server as: install Debian's `postgresql` package"
                .into(),
        );
    }
    // SAFETY: non-null pointer returned by getpwnam.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok(Some((uid, gid)))
}

fn as_identity(command: &mut Command, identity: Option<(u32, u32)>) {
    if let Some((uid, gid)) = identity {
        command.uid(uid).gid(gid);
    }
}

fn chown(path: &Path, identity: Option<(u32, u32)>) -> Result<(), String> {
    match identity {
        Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", path.display())),
        None => Ok(()),
    }
}

/// Cluster directories are `<tmp>/adaptor-test-pg-<pid of the test binary>-<random>`.
const CLUSTER_PREFIX: &str = "adaptor-test-pg-";

/// Remove the directories of clusters whose test binary was killed (SIGKILL skips the
/// `atexit` handler; the server itself died with it through its death signal).
fn sweep_abandoned_clusters() {
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CLUSTER_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists()
            && let Err(e) = std::fs::remove_dir_all(entry.path())
        {
            eprintln!(
                "pg.rs: removing the abandoned cluster {}: {e}",
                entry.path().display()
            );
        }
    }
}

fn start_private_cluster() -> Result<Server, String> {
    let (initdb, postgres) = find_binaries(Path::new("/usr/lib/postgresql"))?;
    let identity = server_identity()?;
    sweep_abandoned_clusters();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{CLUSTER_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|e| format!("creating the cluster directory: {e}"))?
        .keep();
    // From here on the directory is ours to remove, on success by the atexit handler.
    let result = init_and_start(&dir, &initdb, &postgres, identity);
    if result.is_err()
        && let Err(e) = std::fs::remove_dir_all(&dir)
    {
        eprintln!(
            "pg.rs: removing {} after a failed start: {e}",
            dir.display()
        );
    }
    result
}

fn init_and_start(
    dir: &Path,
    initdb: &Path,
    postgres: &Path,
    identity: Option<(u32, u32)>,
) -> Result<Server, String> {
    chown(dir, identity)?;
    let data = dir.join("data");
    let sockets = dir.join("sockets");
    std::fs::create_dir(&sockets).map_err(|e| format!("creating {}: {e}", sockets.display()))?;
    chown(&sockets, identity)?;
    let mut init = Command::new(initdb);
    init.arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .current_dir(dir)
        .stdin(Stdio::null());
    as_identity(&mut init, identity);
    let out = init
        .output()
        .map_err(|e| format!("running {}: {e}", initdb.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}{}",
            initdb.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // A free port can be taken by someone else before the server binds it; try a few.
    let mut last_error = String::new();
    for attempt in 0..3 {
        let port = free_port()?;
        let log = dir.join(format!("postgres-{attempt}.log"));
        match run_server(dir, postgres, &data, &sockets, &log, port, identity) {
            Ok(server) => return Ok(server),
            Err((message, port_taken)) => {
                last_error = message;
                if !port_taken {
                    break;
                }
            }
        }
    }
    Err(last_error)
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("finding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// Start the server and wait until it accepts connections. On failure: the message (with the
/// server's log) and whether the port was taken (worth another try).
fn run_server(
    dir: &Path,
    postgres: &Path,
    data: &Path,
    sockets: &Path,
    log: &Path,
    port: u16,
    identity: Option<(u32, u32)>,
) -> Result<Server, (String, bool)> {
    let plain = |m: String| (m, false);
    let log_file =
        File::create(log).map_err(|e| plain(format!("creating {}: {e}", log.display())))?;
    let log_err = log_file
        .try_clone()
        .map_err(|e| plain(format!("duplicating the log handle: {e}")))?;
    let mut command = Command::new(postgres);
    command
        .arg("-D")
        .arg(data)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
        .arg(sockets)
        // A test cluster: durability off (the tests kill clients, never the server), enough
        // connections for racing processes.
        .args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err);
    as_identity(&mut command, identity);
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec. This runs
    // after the uid change (which would clear the death signal), so the setting sticks.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the test binary exited before exec"));
            }
            Ok(())
        });
    }
    // PR_SET_PDEATHSIG fires when the *thread* that forked exits, so fork from a thread that
    // lives as long as the process.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("test-postgres-parent".into())
        .spawn(move || {
            let _ = tx.send(command.spawn());
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| plain(format!("starting the server's parent thread: {e}")))?;
    let child = rx
        .recv()
        .map_err(|e| plain(format!("the server's parent thread vanished: {e}")))?
        .map_err(|e| plain(format!("running {}: {e}", postgres.display())))?;
    register_stop(child, dir.to_path_buf()).map_err(plain)?;
    let server = Server {
        params: vec![
            ("host".into(), "127.0.0.1".into()),
            ("port".into(), port.to_string()),
            ("user".into(), "postgres".into()),
        ],
        admin_db: "postgres".into(),
    };
    let conninfo = server.conninfo(&server.admin_db);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| plain(format!("building a runtime: {e}")))?;
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let attempt = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            let conn = tokio::spawn(connection);
            client
                .simple_query("SELECT 1")
                .await
                .map_err(|e| e.to_string())?;
            drop(client);
            let _ = conn.await;
            Ok::<(), String>(())
        });
        let last = match attempt {
            Ok(()) => return Ok(server),
            Err(e) => e,
        };
        let exited = {
            let mut guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut().map(|(child, _)| child.try_wait()) {
                Some(Ok(Some(status))) => {
                    guard.take();
                    Some(status.to_string())
                }
                _ => None,
            }
        };
        let log_text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(status) = exited {
            let port_taken =
                log_text.contains("could not bind") || log_text.contains("Address already in use");
            return Err((
                format!(
                    "postgres exited ({status}) before accepting connections; its log:\n{log_text}"
                ),
                port_taken,
            ));
        }
        if Instant::now() > deadline {
            return Err(plain(format!(
                "postgres did not accept connections within {START_LIMIT:?} (last error: \
                 {last}); its log:\n{log_text}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Keep the child for the `atexit` handler (registered once).
fn register_stop(child: Child, dir: PathBuf) -> Result<(), String> {
    static REGISTERED: OnceLock<i32> = OnceLock::new();
    *CLUSTER.lock().unwrap_or_else(|p| p.into_inner()) = Some((child, dir));
    // SAFETY: registering a function that never unwinds.
    let rc = *REGISTERED.get_or_init(|| unsafe { libc::atexit(stop_cluster) });
    if rc != 0 {
        return Err("atexit refused the cleanup handler".into());
    }
    Ok(())
}

/// `atexit` handler: stop the server gracefully (SIGINT = fast shutdown), escalate to SIGKILL
/// after [`STOP_LIMIT`], remove the directory. Problems are reported on stderr.
extern "C" fn stop_cluster() {
    let outcome = std::panic::catch_unwind(|| {
        let taken = CLUSTER.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some((mut child, dir)) = taken else {
            return;
        };
        let mut stderr = std::io::stderr();
        let pid = child.id() as libc::pid_t;
        // SAFETY: signalling our own child by pid.
        if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
            let _ = writeln!(
                stderr,
                "pg.rs: SIGINT to the test postgres {pid}: {}",
                std::io::Error::last_os_error()
            );
        }
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    let _ = writeln!(
                        stderr,
                        "pg.rs: the test postgres {pid} ignored SIGINT for {STOP_LIMIT:?}; killing it"
                    );
                    if let Err(e) = child.kill().and_then(|()| child.wait().map(|_| ())) {
                        let _ = writeln!(stderr, "pg.rs: killing the test postgres {pid}: {e}");
                    }
                    break;
                }
                Err(e) => {
                    let _ = writeln!(stderr, "pg.rs: waiting for the test postgres {pid}: {e}");
                    break;
                }
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            let _ = writeln!(stderr, "pg.rs: removing {}: {e}", dir.display());
        }
    });
    if outcome.is_err() {
        let _ = writeln!(std::io::stderr(), "pg.rs: the cleanup handler panicked");
    }
}

/// A database created for one test; dropped (`DROP DATABASE … WITH (FORCE)`) when this
/// value is.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Connection string of the database (`key=value` form, accepted wherever a URL is).
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let server = server().clone();
        let name = self.name.clone();
        // Its own thread and runtime: Drop may run inside (or outside) a tokio runtime.
        let joined = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(admin(
                &server,
                &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
            ))
        })
        .join();
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("pg.rs: dropping test database {}: {e}", self.name),
            Err(_) => eprintln!("pg.rs: dropping test database {}: panicked", self.name),
        }
    }
}

/// Run one statement on the server's admin database.
async fn admin(server: &Server, sql: &str) -> Result<(), String> {
    let conninfo = server.conninfo(&server.admin_db);
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connecting to the admin database: {e}"))?;
    let conn = tokio::spawn(connection);
    let result = client
        .batch_execute(sql)
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => format!("{sql}: {}", db.message()),
            None => format!("{sql}: {e}"),
        });
    drop(client);
    match conn.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("the admin connection failed: {e}")),
        Err(e) => return Err(format!("the admin connection task failed: {e}")),
    }
    result
}

/// A fresh, empty database on the test server (started on first use); its URL is
/// [`TestDatabase::url`].
pub async fn test_database() -> TestDatabase {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let server = tokio::task::spawn_blocking(server)
        .await
        .expect("server start");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "t_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    if let Err(e) = admin(server, &format!("CREATE DATABASE \"{name}\"")).await {
        panic!("creating test database {name}: {e}");
    }
    TestDatabase {
        url: server.conninfo(&name),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_package_to_install() {
        let empty = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(empty.path().join("15").join("bin")).unwrap();
        let err = find_binaries(empty.path()).unwrap_err();
        assert!(
            err.contains("install Debian's `postgresql` package"),
            "{err}"
        );
        assert!(err.contains(URL_ENV), "{err}");
        let err = find_binaries(&empty.path().join("absent")).unwrap_err();
        assert!(err.contains("apt-get install"), "{err}");
    }

    #[test]
    fn the_newest_complete_version_is_chosen() {
        let root = tempfile::tempdir().unwrap();
        for (version, files) in [
            ("13", &["initdb", "postgres"][..]),
            ("15", &["initdb", "postgres"]),
            ("16", &["initdb"]),
        ] {
            let bin = root.path().join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            for f in files {
                std::fs::write(bin.join(f), "").unwrap();
            }
        }
        let (initdb, postgres) = find_binaries(root.path()).unwrap();
        assert_eq!(initdb, root.path().join("15/bin/initdb"));
        assert_eq!(postgres, root.path().join("15/bin/postgres"));
    }

    #[test]
    fn abandoned_cluster_directories_are_swept() {
        let mut exited = Command::new("true").spawn().unwrap();
        let dead = exited.id();
        exited.wait().unwrap();
        let abandoned = std::env::temp_dir().join(format!("{CLUSTER_PREFIX}{dead}-test"));
        let ours =
            std::env::temp_dir().join(format!("{CLUSTER_PREFIX}{}-test", std::process::id()));
        for dir in [&abandoned, &ours] {
            std::fs::create_dir_all(dir.join("data")).unwrap();
        }
        sweep_abandoned_clusters();
        assert!(
            !abandoned.exists(),
            "the dead binary's directory is removed"
        );
        assert!(ours.exists(), "a live binary's directory is kept");
        std::fs::remove_dir_all(&ours).unwrap();
    }

    #[test]
    fn conninfo_values_are_quoted() {
        let server = Server {
            params: vec![("password".into(), "it's a \\ pass".into())],
            admin_db: "postgres".into(),
        };
        assert_eq!(
            server.conninfo("t_1"),
            "password='it\\'s a \\\\ pass' dbname='t_1'"
        );
    }
}
