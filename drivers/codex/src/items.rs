//! Codex thread items → events and transcript, for both transports. exec writes items in
//! snake_case (`command_execution`, `aggregated_output`), the app-server in camelCase
//! (`commandExecution`, `aggregatedOutput`); [`kind`] and [`field`] accept both.
//!
//! Items: agent message → text, reasoning → thinking, command execution → tool `shell`
//! (`{command}`; result = aggregated output, an error when the exit code is non-zero or the
//! command failed or was declined), file change → tool `apply_patch` (`{changes}`), MCP tool
//! call → tool `<server>/<tool>`, web search → tool `web_search` (`{query}`), todo list →
//! vendor event and a system item, error → notice. Must not: know either wire protocol.

use adaptor_sdk::json::str_field;
use adaptor_sdk::{ItemKind, items, top_scope};
use serde_json::{Value, json};

use crate::session::CodexSession;

/// The item's type in snake_case (`commandExecution` → `command_execution`).
pub(crate) fn kind(item: &Value) -> String {
    let raw = str_field(item, "type").unwrap_or_default();
    let mut out = String::with_capacity(raw.len() + 4);
    for c in raw.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A field by its snake_case name, or its camelCase spelling.
pub(crate) fn field<'a>(item: &'a Value, snake: &str) -> Option<&'a Value> {
    if let Some(v) = item.get(snake) {
        return Some(v);
    }
    let mut camel = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            camel.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    item.get(&camel)
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| {
                p.as_str()
                    .map(str::to_owned)
                    .or_else(|| str_field(p, "text").map(str::to_owned))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// What a tool-like item is called and its arguments.
fn tool_of(kind: &str, item: &Value) -> Option<(String, Value)> {
    match kind {
        "command_execution" => Some((
            "shell".into(),
            json!({ "command": field(item, "command").cloned().unwrap_or(Value::Null) }),
        )),
        "file_change" => Some((
            "apply_patch".into(),
            json!({ "changes": field(item, "changes").cloned().unwrap_or(json!([])) }),
        )),
        "mcp_tool_call" => Some((
            format!(
                "{}/{}",
                str_field(item, "server").unwrap_or("mcp"),
                str_field(item, "tool").unwrap_or("tool")
            ),
            field(item, "arguments").cloned().unwrap_or(json!({})),
        )),
        "web_search" => Some((
            "web_search".into(),
            json!({ "query": field(item, "query").cloned().unwrap_or(Value::Null) }),
        )),
        _ => None,
    }
}

/// A finished tool item's output and whether it failed.
fn tool_result_of(kind: &str, item: &Value) -> (String, bool) {
    let status = str_field(item, "status").unwrap_or_default();
    let failed_status = matches!(status, "failed" | "declined");
    match kind {
        "command_execution" => {
            let output = text_of(field(item, "aggregated_output"));
            let code = field(item, "exit_code").and_then(Value::as_i64);
            let output = if output.is_empty() && status == "declined" {
                "declined".to_owned()
            } else {
                output
            };
            (output, failed_status || code.is_some_and(|c| c != 0))
        }
        "file_change" => {
            let changes = field(item, "changes")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            let kind = match c.get("kind") {
                                Some(Value::String(k)) => k.clone(),
                                Some(Value::Object(o)) => o
                                    .get("type")
                                    .and_then(Value::as_str)
                                    .unwrap_or("change")
                                    .to_owned(),
                                _ => "change".to_owned(),
                            };
                            format!("{kind} {}", str_field(c, "path").unwrap_or("?"))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            (
                if changes.is_empty() {
                    status.to_owned()
                } else {
                    changes
                },
                failed_status,
            )
        }
        "mcp_tool_call" => match field(item, "error").filter(|e| !e.is_null()) {
            Some(e) => (text_of(e.get("message").or(Some(e))), true),
            None => (text_of(field(item, "result")), failed_status),
        },
        _ => (String::new(), failed_status),
    }
}

impl CodexSession {
    /// `item.started` / `item/started`.
    pub(crate) fn item_started(&mut self, item: &Value, out: &mut adaptor_sdk::Actions) {
        let kind = kind(item);
        let id = str_field(item, "id").unwrap_or_default().to_owned();
        if let Some((name, args)) = tool_of(&kind, item)
            && !self.open_tools.iter().any(|(open, _)| *open == id)
        {
            let args = args.to_string();
            out.tool_start(&id, &name, Some(args.clone()), &top_scope());
            out.tool_end(&id, &name, Some(args.clone()), &top_scope());
            self.transcript
                .push(items::tool_call(&id, &name, Some(args)), out);
            self.open_tools.push((id, name));
        }
    }

    /// `item.completed` / `item/completed`.
    pub(crate) fn item_completed(&mut self, item: &Value, out: &mut adaptor_sdk::Actions) {
        let kind = kind(item);
        let id = str_field(item, "id").unwrap_or_default().to_owned();
        match kind.as_str() {
            "agent_message" => {
                let text = text_of(field(item, "text"));
                self.finish_text(false, &id, &text, out);
                self.texts.push(text);
            }
            "reasoning" => {
                let text = match field(item, "text") {
                    Some(t) => text_of(Some(t)),
                    None => text_of(field(item, "summary").or_else(|| field(item, "content"))),
                };
                self.finish_text(true, &id, &text, out);
            }
            "command_execution" | "file_change" | "mcp_tool_call" | "web_search" => {
                self.item_started(item, out);
                let (output, is_error) = tool_result_of(&kind, item);
                self.open_tools.retain(|(open, _)| *open != id);
                out.tool_result(&id, &output, is_error, &top_scope());
                self.transcript
                    .push(items::tool_result(&id, &output, is_error), out);
            }
            "todo_list" => {
                let data = item.to_string();
                out.vendor("todo_list", &data);
                let mut entry = items::text(ItemKind::System, "todo list");
                entry.data_json = Some(data);
                self.transcript.push(entry, out);
            }
            "error" => {
                let message = text_of(field(item, "message"));
                out.notice("codex-error", &message, Some(item.to_string()));
            }
            // The user's own message echoed back (app-server): nothing to map.
            "user_message" => {}
            other => out.vendor(other, &item.to_string()),
        }
    }

    /// A streamed part (text or reasoning) grew by `delta` (app-server deltas).
    pub(crate) fn delta(
        &mut self,
        thinking: bool,
        id: &str,
        delta: &str,
        out: &mut adaptor_sdk::Actions,
    ) {
        let key = (thinking, id.to_owned());
        if !self.streaming_parts.contains(&key) {
            self.streaming_parts.push(key);
            if thinking {
                out.thinking_start(id, &top_scope());
            } else {
                out.text_start(id, &top_scope());
            }
        }
        if thinking {
            out.thinking_delta(id, delta, &top_scope());
        } else {
            out.text_delta(id, delta, &top_scope());
        }
    }

    /// A text or reasoning item is complete: close its streamed part, or emit it whole.
    fn finish_text(
        &mut self,
        thinking: bool,
        id: &str,
        text: &str,
        out: &mut adaptor_sdk::Actions,
    ) {
        let key = (thinking, id.to_owned());
        let streamed = self.streaming_parts.iter().position(|k| *k == key);
        match streamed {
            Some(at) => {
                self.streaming_parts.remove(at);
            }
            None => {
                if thinking {
                    out.thinking_start(id, &top_scope());
                    out.thinking_delta(id, text, &top_scope());
                } else {
                    out.text_start(id, &top_scope());
                    out.text_delta(id, text, &top_scope());
                }
            }
        }
        if thinking {
            out.thinking_end(id, &top_scope());
        } else {
            out.text_end(id, &top_scope());
        }
        let kind = if thinking {
            ItemKind::Thinking
        } else {
            ItemKind::Assistant
        };
        self.transcript.push(items::text(kind, text), out);
    }

    /// Close every part and tool a dead or failed turn left open.
    pub(crate) fn close_open(&mut self, out: &mut adaptor_sdk::Actions) {
        for (thinking, id) in std::mem::take(&mut self.streaming_parts) {
            if thinking {
                out.thinking_end(&id, &top_scope());
            } else {
                out.text_end(&id, &top_scope());
            }
        }
        for (id, _) in std::mem::take(&mut self.open_tools) {
            out.tool_result(
                &id,
                "the turn ended before the tool finished",
                true,
                &top_scope(),
            );
            self.transcript.push(
                items::tool_result(&id, "the turn ended before the tool finished", true),
                out,
            );
        }
    }
}
