//! JSON helpers for drivers: config parsing, field access, canonical fingerprints and CLI
//! version checks. Nothing here knows a particular provider.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{CheckLevel, ConfigError, Descriptor, EnvironmentReport, ProbeOutput};

/// The parsed config for a resident process's next turn: `previous` (parsed from
/// `previous_json` for the turn before) taken as it is when the text is unchanged — the host
/// keeps a process for one config —, else `next_json` parsed (`Null` when it is not a JSON
/// object, as a session's `new` reads it).
pub fn next_turn_config(previous_json: &str, previous: &mut Value, next_json: &str) -> Value {
    if next_json == previous_json {
        std::mem::take(previous)
    } else {
        parse_config(next_json).unwrap_or(Value::Null)
    }
}

/// Parse a `config-json` string; it must be a JSON object (`null` counts as `{}`).
pub fn parse_config(config_json: &str) -> Result<Value, ConfigError> {
    let value: Value = serde_json::from_str(config_json).map_err(|e| ConfigError {
        path: String::new(),
        message: format!("config is not valid JSON: {e}"),
    })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Default::default())),
        other => Err(ConfigError {
            path: String::new(),
            message: format!("config must be a JSON object, got {}", kind(&other)),
        }),
    }
}

/// The JSON type name of a value, for error messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A string field of an object, if present and a string.
pub fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// A non-negative integer field of an object, if present.
pub fn u64_field(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

/// Check a config object against a simple field table: every key must be listed, and each
/// listed key must have the given JSON type (`"string"`, `"non-empty-string"`, `"boolean"`,
/// `"integer"`, `"array-of-strings"`, `"object-of-strings"`). Unknown keys are rejected so
/// typos surface.
pub fn check_fields(config: &Value, fields: &[(&str, &str)]) -> Result<(), ConfigError> {
    let Some(map) = config.as_object() else {
        return Err(ConfigError {
            path: String::new(),
            message: format!("config must be a JSON object, got {}", kind(config)),
        });
    };
    for (key, value) in map {
        let Some((_, ty)) = fields.iter().find(|(name, _)| name == key) else {
            let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            return Err(ConfigError {
                path: format!("/{key}"),
                message: format!("unknown field `{key}` (known: {})", known.join(", ")),
            });
        };
        let ok = match *ty {
            "string" => value.is_string(),
            "non-empty-string" => value.as_str().is_some_and(|s| !s.trim().is_empty()),
            "boolean" => value.is_boolean(),
            "integer" => value.is_u64(),
            "array-of-strings" => value
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string)),
            "object-of-strings" => value
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string)),
            _ => false,
        };
        if !ok {
            let message = if *ty == "non-empty-string" && value.is_string() {
                format!("field `{key}` must not be empty")
            } else {
                format!("field `{key}` must be {ty}, got {}", kind(value))
            };
            return Err(ConfigError {
                path: format!("/{key}"),
                message,
            });
        }
    }
    Ok(())
}

/// Check that the string field `key`, when present, is one of `allowed`.
pub fn check_one_of(config: &Value, key: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    match str_field(config, key) {
        Some(value) if !allowed.contains(&value) => Err(ConfigError {
            path: format!("/{key}"),
            message: format!(
                "`{key}` must be one of {}, not `{value}`",
                allowed.join(", ")
            ),
        }),
        _ => Ok(()),
    }
}

/// Check that the integer field `key`, when present, is at least 1 (a turn limit, a count).
pub fn check_positive(config: &Value, key: &str) -> Result<(), ConfigError> {
    if config.get(key).is_some() && u64_field(config, key).unwrap_or(0) == 0 {
        return Err(ConfigError {
            path: format!("/{key}"),
            message: format!("`{key}` must be at least 1"),
        });
    }
    Ok(())
}

/// Check that no entry of the string array `extra_args` sets one of the driver-owned
/// flags in `owned` (`--model=x` counts as `--model`): the error names the entry's path.
pub fn check_owned_flags(config: &Value, owned: &[&str]) -> Result<(), ConfigError> {
    let Some(args) = config.get("extra_args").and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, arg) in args.iter().enumerate() {
        let Some(arg) = arg.as_str() else { continue };
        let flag = arg.split_once('=').map_or(arg, |(f, _)| f);
        if let Some(flag) = owned.iter().find(|o| **o == flag) {
            return Err(ConfigError {
                path: format!("/extra_args/{i}"),
                message: format!(
                    "`{flag}` is set by the driver from the request; extra args may not override it"
                ),
            });
        }
    }
    Ok(())
}

/// Whether `id` is a UUID in its canonical text form (`8-4-4-4-12` hexadecimal digits, either
/// case): the shape of Claude Code's session ids and Codex's thread ids. A driver checks a
/// resume id with it before the id reaches a command line, so a stored id can never be an
/// option (`--settings=…`) or anything but an id.
pub fn is_uuid(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Canonical JSON text: object keys sorted, no insignificant whitespace.
pub fn canonical(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String((*key).clone()).to_string());
                    out.push(':');
                    write(&map[*key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// `sha256:<hex>` over a domain-separated canonical encoding of `value`. Stable across
/// processes, instances and key order.
pub fn canonical_fingerprint(domain: &str, value: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"agent-adaptor/session-config/v1\0");
    hasher.update(domain.as_bytes());
    hasher.update(b"\0");
    hasher.update(canonical(value).as_bytes());
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Parse a dotted numeric version (`2.1.197`, `v1.0`); other text after the numbers is
/// ignored. None when it does not start with a number.
pub fn parse_version(text: &str) -> Option<Vec<u64>> {
    let text = text.trim().trim_start_matches('v');
    let numeric: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts: Option<Vec<u64>> = numeric
        .split('.')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().ok())
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// The first version-looking token in a `--version` output.
pub fn find_version(output: &str) -> Option<String> {
    output
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .map(|t| t.trim_start_matches('v'))
        .find(|t| t.contains('.') && parse_version(t).is_some())
        .map(|t| {
            t.chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect::<String>()
                .trim_end_matches('.')
                .to_owned()
        })
}

/// Compare two dotted versions numerically (missing components count as 0).
pub fn compare_versions(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let len = a.len().max(b.len());
    for i in 0..len {
        let (x, y) = (
            a.get(i).copied().unwrap_or(0),
            b.get(i).copied().unwrap_or(0),
        );
        if x != y {
            return x.cmp(&y);
        }
    }
    std::cmp::Ordering::Equal
}

/// The default environment report: is the CLI (`program`, as configured) there, and is its
/// version in the range the driver was verified with?
pub fn default_environment_report(
    descriptor: &Descriptor,
    program: &str,
    outputs: &[ProbeOutput],
) -> EnvironmentReport {
    let mut checks = Vec::new();
    let mut cli_version = None;
    let probe = outputs.iter().find(|o| o.id == "version");
    match probe {
        Some(out) if out.code == Some(0) => {
            let text = String::from_utf8_lossy(&out.stdout);
            checks.push(crate::Check {
                code: "cli.present".into(),
                level: CheckLevel::Pass,
                message: format!("`{program}` runs"),
                hint: None,
            });
            cli_version = find_version(&text);
            checks.push(version_check(descriptor, cli_version.as_deref()));
        }
        Some(out) => checks.push(crate::Check {
            code: "cli.present".into(),
            level: CheckLevel::Fail,
            message: match &out.error {
                Some(e) => format!("`{program}` could not run: {e}"),
                None => format!("`{program} --version` failed with exit code {:?}", out.code),
            },
            hint: Some(format!(
                "install {} or set the driver config's `command` to its path",
                descriptor.display_name
            )),
        }),
        None => checks.push(crate::Check {
            code: "cli.present".into(),
            level: CheckLevel::Warn,
            message: "no version probe was run".into(),
            hint: None,
        }),
    }
    EnvironmentReport {
        checks,
        cli_version,
    }
}

fn version_check(descriptor: &Descriptor, version: Option<&str>) -> crate::Check {
    let range = &descriptor.cli_versions;
    let Some(found) = version.and_then(parse_version) else {
        return crate::Check {
            code: "cli.version".into(),
            level: CheckLevel::Warn,
            message: "could not read the CLI version".into(),
            hint: None,
        };
    };
    let version = version.unwrap_or_default();
    let below = range
        .min
        .as_deref()
        .and_then(parse_version)
        .is_some_and(|min| compare_versions(&found, &min).is_lt());
    let above = range
        .max_exclusive
        .as_deref()
        .and_then(parse_version)
        .is_some_and(|max| compare_versions(&found, &max).is_ge());
    let verified = range.verified.iter().any(|v| v == version);
    let (level, message) = if below || above {
        (
            CheckLevel::Warn,
            format!(
                "CLI version {version} is outside the supported range ({} .. {})",
                range.min.as_deref().unwrap_or("any"),
                range.max_exclusive.as_deref().unwrap_or("any")
            ),
        )
    } else if verified {
        (
            CheckLevel::Pass,
            format!("CLI version {version} is verified"),
        )
    } else {
        (
            CheckLevel::Pass,
            format!("CLI version {version} is in the supported range"),
        )
    };
    crate::Check {
        code: "cli.version".into(),
        level,
        message,
        hint: (level == CheckLevel::Warn).then(|| {
            format!(
                "verified versions: {}",
                if range.verified.is_empty() {
                    "none listed".to_owned()
                } else {
                    range.verified.join(", ")
                }
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_next_turn_keeps_the_parsed_config_only_when_its_text_is_unchanged() {
        let text = r#"{"a":1}"#;
        let mut kept = json!({"a": 1, "marker": "kept parse"});
        assert_eq!(
            next_turn_config(text, &mut kept, text)["marker"],
            "kept parse",
            "the same text takes the kept value"
        );
        let mut kept = json!({"a": 1});
        assert_eq!(
            next_turn_config(text, &mut kept, r#"{"a":2}"#),
            json!({"a": 2})
        );
        assert_eq!(next_turn_config(text, &mut kept, "null"), json!({}));
        assert_eq!(next_turn_config(text, &mut kept, "[1]"), Value::Null);
    }

    #[test]
    fn uuids_are_recognised_and_nothing_else() {
        for ok in [
            "81aad91c-21f6-45b5-8dc7-e4b3f059c312",
            "019A0000-0000-7000-8000-000000000000",
        ] {
            assert!(is_uuid(ok), "{ok}");
        }
        for bad in [
            "",
            "--settings={\"apiKeyHelper\":\"touch /tmp/x\"}",
            "81aad91c21f645b58dc7e4b3f059c312",
            "81aad91c-21f6-45b5-8dc7-e4b3f059c31",
            "81aad91c-21f6-45b5-8dc7-e4b3f059c312 ",
            "81aad91c-21f6-45b5-8dc7-e4b3f059c3g2",
            "-1aad91c-21f6-45b5-8dc7-e4b3f059c312",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }

    #[test]
    fn fingerprint_ignores_key_order() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b: Value = serde_json::from_str(r#"{ "a": {"x":"s","y":[1,2]}, "b":1 }"#).unwrap();
        assert_eq!(
            canonical_fingerprint("d", &a),
            canonical_fingerprint("d", &b)
        );
        assert_ne!(
            canonical_fingerprint("d", &a),
            canonical_fingerprint("e", &a)
        );
        assert!(canonical_fingerprint("d", &a).starts_with("sha256:"));
    }

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(
            find_version("2.1.197 (Claude Code)"),
            Some("2.1.197".into())
        );
        assert_eq!(find_version("codex-cli 0.171.0"), Some("0.171.0".into()));
        assert_eq!(
            find_version("reference-provider 1.0.0"),
            Some("1.0.0".into())
        );
        assert!(compare_versions(&[1, 2], &[1, 10]).is_lt());
        assert!(compare_versions(&[1, 0, 0], &[1]).is_eq());
    }

    #[test]
    fn check_fields_rejects_unknown_and_mistyped() {
        let fields = [("command", "string"), ("extra_args", "array-of-strings")];
        assert!(check_fields(&json!({"command": "x"}), &fields).is_ok());
        let e = check_fields(&json!({"comand": "x"}), &fields).unwrap_err();
        assert_eq!(e.path, "/comand");
        let e = check_fields(&json!({"extra_args": [1]}), &fields).unwrap_err();
        assert!(e.message.contains("array-of-strings"));
    }
}

/// One stdout line of a JSON Lines protocol, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonLine {
    /// Only whitespace.
    Blank,
    /// A JSON object, with the line's text (lossily decoded, terminator removed).
    Object(Value, String),
    /// Looks like JSON (starts with `{`) but does not parse: a protocol problem, described.
    Malformed(String),
    /// Plain text (CLIs print banners and warnings): record it, do not fail on it.
    Text(String),
    /// Longer than the framer's limit: a protocol problem, described.
    Oversized(String),
}

/// Classify a framed line of a JSON Lines protocol.
pub fn json_line(line: crate::Line) -> JsonLine {
    let bytes = match line {
        crate::Line::Complete(bytes) => bytes,
        crate::Line::Oversized { len, .. } => {
            return JsonLine::Oversized(format!("a {len}-byte line exceeds the line limit"));
        }
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if text.trim().is_empty() {
        return JsonLine::Blank;
    }
    match serde_json::from_str(&text) {
        Ok(v @ Value::Object(_)) => JsonLine::Object(v, text),
        _ if text.trim_start().starts_with('{') => {
            JsonLine::Malformed(format!("malformed JSON line: {}", prefix(&text, 200)))
        }
        _ => JsonLine::Text(text),
    }
}

/// The first `max` characters of `text`.
pub fn prefix(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// How a process ended, for failure messages: "was killed by signal 9", "exited with code 1",
/// or "ended".
pub fn describe_exit(status: Option<&crate::ExitStatus>) -> String {
    match status {
        Some(crate::ExitStatus {
            signal: Some(sig), ..
        }) => format!("was killed by signal {sig}"),
        Some(crate::ExitStatus { code: Some(c), .. }) => format!("exited with code {c}"),
        _ => "ended".into(),
    }
}

/// The model for a run: the request's per-run model, else the config's `model` field.
pub fn requested_model(request: &crate::RunRequest, config: &Value) -> Option<String> {
    request
        .model
        .clone()
        .or_else(|| str_field(config, "model").map(str::to_owned))
}
