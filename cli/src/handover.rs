//! Handing an `adaptor run` to a resident host (`adaptor serve`): the caller's side, and the
//! wire format both sides share.
//!
//! The caller is the `adaptor` launcher (`launcher.rs`), a small executable that asks a
//! host first and otherwise executes the whole CLI, `adaptor-host`, in its own place. The
//! host's side (the checks, serving the run) is `serve.rs` of `adaptor-host`.
//!
//! The protocol (version 1, a stream socket): the caller sends an 8-byte head (`ADS1`, the
//! body's length as a little-endian `u32`) with its descriptors 0, 1, 2 and its working
//! directory attached (`SCM_RIGHTS`), then the body: the identity of the `adaptor-host`
//! executable it would otherwise run (five little-endian 64-bit numbers), its arguments and
//! its environment (each a count, then each item as a length and bytes). The host answers
//! `A` (accepted) or `R` with a length and a reason (refused). After `A`, the caller may
//! send `C` (Ctrl-C) any number of times; the host ends with `X` and the exit code.
//!
//! The socket: `$ADAPTOR_SOCKET` (absolute; empty turns serving off for the callers that
//! see it), else `$XDG_RUNTIME_DIR/agent-adaptor/serve.sock`, else
//! `<temp dir>/agent-adaptor-<uid>/serve.sock`.
//!
//! Owns: the socket's path, the caller's checks of the host (its directory private to this
//! user, the host this user), the request, Ctrl-C on to the host, the exit code. Must not:
//! depend on anything but `std`, `libc` and `signal-hook-registry` — the launcher links
//! this module alone, and every `adaptor` command pays for the launcher's start.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::{EXIT_DRIVER_FAULT, EXIT_INTERRUPTED, PATIENCE};

/// The variable naming the socket.
pub const SOCKET_ENV: &str = "ADAPTOR_SOCKET";

/// The head's first four bytes: the protocol and its version.
pub const MAGIC: [u8; 4] = *b"ADS1";

/// The largest body accepted (arguments and environment).
pub const MAX_BODY: u32 = 4 << 20;

/// The host accepted the run.
pub const ACCEPTED: u8 = b'A';

/// The host refused the run; a reason follows.
pub const REFUSED: u8 = b'R';

/// The run is over; its exit code follows.
pub const EXITED: u8 = b'X';

/// The caller's Ctrl-C.
pub const CANCEL: u8 = b'C';

/// What became of `adaptor run`'s offer to a resident host.
pub enum HandOver {
    /// The host ran it: exit with this code.
    Served(u8),
    /// Run it here; why, if a host was there to ask.
    Local(Option<String>),
}

/// Hand `args` (this process's arguments) to the resident host if they are an
/// `adaptor run` and a host serves them (see the module docs). `host` is the `adaptor-host`
/// executable this caller would run otherwise: a host serves only callers of its own build.
pub fn hand_over(args: &[OsString], host: &Path) -> HandOver {
    if command_word(args) != Some("run") {
        return HandOver::Local(None);
    }
    let Some(path) = socket_path() else {
        return HandOver::Local(None);
    };
    if !path.is_absolute() {
        return HandOver::Local(Some(format!("{SOCKET_ENV} is not an absolute path")));
    }
    match path.parent().map(private_dir) {
        Some(Ok(())) => {}
        Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => return HandOver::Local(None),
        Some(Err(e)) => return HandOver::Local(Some(e.to_string())),
        None => return HandOver::Local(Some("the socket path has no directory".into())),
    }
    let conn = match UnixStream::connect(&path) {
        Ok(conn) => conn,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return HandOver::Local(None);
        }
        Err(e) => return HandOver::Local(Some(format!("{}: {e}", path.display()))),
    };
    match offer(&conn, args, host) {
        Ok(()) => HandOver::Served(await_exit(&conn)),
        Err(why) => HandOver::Local(Some(why)),
    }
}

/// Send the request and read the host's answer: `Err` with why when it is not accepted.
fn offer(conn: &UnixStream, args: &[OsString], host: &Path) -> Result<(), String> {
    if peer_uid(conn).map_err(|e| format!("the host's credentials: {e}"))? != euid() {
        return Err("the socket's host is another user".into());
    }
    let identity = Identity::of(host).map_err(|e| format!("{}: {e}", host.display()))?;
    let cwd = open_dir(c".").map_err(|e| format!("the working directory: {e}"))?;
    let mut body = Vec::with_capacity(4096);
    identity.encode(&mut body);
    put_list(&mut body, args.iter().map(|a| a.as_bytes()));
    let env: Vec<OsString> = std::env::vars_os()
        .map(|(k, v)| {
            let mut pair = k;
            pair.push("=");
            pair.push(v);
            pair
        })
        .collect();
    put_list(&mut body, env.iter().map(|p| p.as_bytes()));
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&MAGIC);
    head[4..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let fds = [0, 1, 2, cwd.as_raw_fd()];
    send_with_fds(conn, &head, &fds).map_err(|e| format!("sending the request: {e}"))?;
    (&*conn)
        .write_all(&body)
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut answer = [0u8; 1];
    (&*conn)
        .read_exact(&mut answer)
        .map_err(|e| format!("the host's answer: {e}"))?;
    match answer[0] {
        ACCEPTED => Ok(()),
        REFUSED => {
            let mut len = [0u8; 4];
            (&*conn)
                .read_exact(&mut len)
                .map_err(|e| format!("the host's answer: {e}"))?;
            let len = u32::from_le_bytes(len).min(64 * 1024) as usize;
            let mut reason = vec![0u8; len];
            (&*conn)
                .read_exact(&mut reason)
                .map_err(|e| format!("the host's answer: {e}"))?;
            Err(format!("refused: {}", String::from_utf8_lossy(&reason)))
        }
        other => Err(format!(
            "the host answered {other:#04x}, not a protocol reply"
        )),
    }
}

/// Wait for the served run's exit code, sending Ctrl-C on to the host meanwhile.
fn await_exit(conn: &UnixStream) -> u8 {
    let raw = conn.as_raw_fd();
    let cancelled = Arc::new(AtomicBool::new(false));
    let seen = cancelled.clone();
    // SAFETY: the action calls write(2) (async-signal-safe) on the connection, which stays
    // open until this process exits (the action is never unregistered: this function's
    // caller exits with the code it returns); and an atomic store.
    let action = unsafe {
        signal_hook_registry::register(libc::SIGINT, move || {
            seen.store(true, Ordering::SeqCst);
            let byte = CANCEL;
            libc::write(raw, (&raw const byte).cast(), 1);
        })
    };
    if let Err(e) = action {
        // Without it the terminal's Ctrl-C ends this process, and the hang-up its run.
        say(format_args!(
            "adaptor: Ctrl-C cannot be passed on to the resident host (it ends the run as a hang-up): {e}"
        ));
    }
    match read_exit(conn, &cancelled) {
        Ok([EXITED, code]) => code,
        Ok([other, _]) => {
            say(format_args!(
                "adaptor: the resident host sent {other:#04x}, not an exit code"
            ));
            EXIT_DRIVER_FAULT
        }
        Err(_) if cancelled.load(Ordering::SeqCst) => EXIT_INTERRUPTED,
        Err(e) => {
            say(format_args!(
                "adaptor: the resident host (adaptor serve) ended before the run did: {e}"
            ));
            EXIT_DRIVER_FAULT
        }
    }
}

/// The host's last two bytes. Waits as long as the run lasts; once `cancelled` (Ctrl-C),
/// only as long as a run of this process's own could take to stop (its watchdog's two
/// patiences, and a second more; see `interrupt`), then gives up with `TimedOut`: the run
/// is then left to the host, as a run of its own that does not stop is left to the kernel.
fn read_exit(conn: &UnixStream, cancelled: &AtomicBool) -> io::Result<[u8; 2]> {
    let patience = PATIENCE * 2 + Duration::from_secs(1);
    // Wakes to look at `cancelled` (a signal does not interrupt the read: the action
    // restarts it).
    conn.set_read_timeout(Some(Duration::from_millis(250)))?;
    let mut reply = [0u8; 2];
    let mut got = 0;
    let mut since_cancel = None;
    while got < reply.len() {
        match (&*conn).read(&mut reply[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if cancelled.load(Ordering::SeqCst)
                    && since_cancel
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        > patience
                {
                    say(format_args!(
                        "adaptor: the resident host did not end the run after Ctrl-C; exiting"
                    ));
                    return Err(io::ErrorKind::TimedOut.into());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(reply)
}

/// The first word of `args` that is not an option (skipping `--color`'s value).
fn command_word(args: &[OsString]) -> Option<&str> {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--color" {
            rest.next();
        } else if !arg.as_bytes().starts_with(b"-") {
            return arg.to_str();
        }
    }
    None
}

/// The socket's path (see the module docs); `None` when `ADAPTOR_SOCKET` is empty.
pub fn socket_path() -> Option<PathBuf> {
    match std::env::var_os(SOCKET_ENV) {
        Some(value) if value.is_empty() => None,
        Some(value) => Some(PathBuf::from(value)),
        None => Some(
            match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
                Some(dir) => PathBuf::from(dir).join("agent-adaptor"),
                None => std::env::temp_dir().join(format!("agent-adaptor-{}", euid())),
            }
            .join("serve.sock"),
        ),
    }
}

/// `Ok` when `dir` is a directory of this user's that nobody else may enter.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if meta.uid() != euid() || meta.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} must belong to this user and be closed to others (mode 0700); it has uid {} \
             and mode {:o}",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// An executable file as the kernel names it: device, inode, size, modification time
/// (seconds, nanoseconds). A rebuilt or reinstalled file differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity([u64; 5]);

impl Identity {
    /// The identity of the file at `path` (symbolic links followed; `/proc/self/exe` names
    /// this process's own executable).
    pub fn of(path: &Path) -> io::Result<Identity> {
        let meta = std::fs::metadata(path)?;
        Ok(Identity([
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
        ]))
    }

    /// Append the identity to a request body.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for n in self.0 {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// Read an identity from a request body (`Err` when the body is cut short).
    pub fn decode(body: &mut Body<'_>) -> Result<Identity, String> {
        let mut id = [0u64; 5];
        for n in &mut id {
            *n = u64::from_le_bytes(body.take(8)?.try_into().expect("8 bytes"));
        }
        Ok(Identity(id))
    }
}

/// A request body being read.
pub struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    /// The body `bytes`, read from its start.
    pub fn new(bytes: &'a [u8]) -> Body<'a> {
        Body(bytes)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("a malformed request (cut short)".into());
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<usize, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize)
    }

    /// Read a list: a count, then each item as a length and its bytes.
    pub fn list(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let count = self.u32()?;
        let mut items = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let len = self.u32()?;
            items.push(self.take(len)?.to_vec());
        }
        Ok(items)
    }
}

/// Append `items` as a count, then each as a length and its bytes.
pub fn put_list<'a>(out: &mut Vec<u8>, items: impl ExactSizeIterator<Item = &'a [u8]>) {
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_le_bytes());
        out.extend_from_slice(item);
    }
}

/// Send `data` with `fds` attached (`SCM_RIGHTS`), then whatever of `data` is left.
fn send_with_fds(conn: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the sendmsg call,
    // and the one control message fits the buffer CMSG_SPACE sized.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        loop {
            let sent = libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                break sent as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    };
    (&*conn).write_all(&data[sent..])
}

/// The directory at `path`, opened for `fchdir` (and for nothing else).
pub fn open_dir(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open(2) on a NUL-terminated path; a new descriptor, owned once, or -1.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The user id of the process at the other end of `conn`.
pub fn peer_uid(conn: &UnixStream) -> io::Result<u32> {
    let mut cred: libc::ucred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) SO_PEERCRED fills a `ucred` of the given length.
    let done = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// Write a line to stderr (the caller's own messages: no text of a driver's), ignoring
/// failure.
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_run_is_handed_over() {
        let args = |words: &[&str]| -> Vec<OsString> {
            std::iter::once("adaptor")
                .chain(words.iter().copied())
                .map(Into::into)
                .collect()
        };
        assert_eq!(command_word(&args(&["run", "hi"])), Some("run"));
        assert_eq!(
            command_word(&args(&["--color", "never", "run", "hi"])),
            Some("run")
        );
        assert_eq!(
            command_word(&args(&["--color=always", "drivers"])),
            Some("drivers")
        );
        assert_eq!(command_word(&args(&["--version"])), None);
    }

    #[test]
    fn a_request_body_reads_back_and_a_cut_one_is_refused() {
        let mut out = Vec::new();
        Identity([1, 2, 3, 4, 5]).encode(&mut out);
        put_list(&mut out, [&b"adaptor"[..], b"run"].into_iter());
        let mut body = Body::new(&out);
        assert_eq!(
            Identity::decode(&mut body).unwrap(),
            Identity([1, 2, 3, 4, 5])
        );
        assert_eq!(body.list().unwrap(), [b"adaptor".to_vec(), b"run".to_vec()]);
        let mut cut = Body::new(&out[..out.len() - 1]);
        Identity::decode(&mut cut).unwrap();
        assert!(cut.list().is_err());
    }
}
