//! Relative paths from untrusted sources (archive entries, a driver's profile spec, an
//! instructions bundle): checked and normalised before anything is joined onto a directory.
//!
//! Must not: touch the file system (callers decide what a path may point at).

/// Check a relative path from an untrusted source (an archive entry, a driver's profile
/// spec, an instructions bundle) and return it normalised (`a/b`; `None` for the root
/// itself), or why it is refused: absolute, a backslash, NUL, `..` or a drive prefix.
pub(crate) fn normalise(raw: &str) -> Result<Option<String>, &'static str> {
    if raw.starts_with('/') {
        return Err("absolute path");
    }
    if raw.contains('\\') {
        return Err("backslash in the path");
    }
    if raw.contains('\0') {
        return Err("NUL in the path");
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("`..` in the path"),
            p if p.len() == 2 && p.ends_with(':') => return Err("drive prefix in the path"),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    Ok(Some(parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn plain_paths_pass_and_escapes_are_refused() {
        assert_eq!(normalise("a/./b//c").unwrap().as_deref(), Some("a/b/c"));
        assert_eq!(normalise("").unwrap(), None);
        for bad in ["/etc/passwd", "a/../b", "..", "a\\b", "c:/x", "a\0b"] {
            assert!(normalise(bad).is_err(), "{bad}");
        }
    }
}
