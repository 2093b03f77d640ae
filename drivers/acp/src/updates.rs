//! `session/update` notifications → events and transcript items.
//!
//! Owns: the text and thought parts (a part runs until another kind of update intervenes:
//! ACP chunks carry no message ids), tool calls and their updates (kind, status, locations and
//! diffs kept as data), plans and the other session updates as vendor events, and the cost
//! `usage_update` reports. Must not: write to the agent or decide the turn's outcome
//! (`session.rs` does).

use std::collections::BTreeMap;

use adaptor_sdk::json::str_field;
use adaptor_sdk::{Actions, ItemKind, TranscriptItem, items, top_scope};
use serde_json::{Value, json};

use crate::session::AcpSession;

/// A streamed text or thought part still open.
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) thinking: bool,
    pub(crate) id: String,
    pub(crate) text: String,
}

/// A tool call seen in this turn.
#[derive(Debug, Clone)]
pub(crate) struct ToolState {
    name: String,
    title: Option<String>,
    status: Option<String>,
    raw_input: Option<Value>,
    raw_output: Option<Value>,
    content: Vec<Value>,
    locations: Vec<Value>,
    ended: bool,
}

/// The per-turn mapping state.
#[derive(Debug, Default)]
pub(crate) struct Updates {
    pub(crate) part: Option<Part>,
    parts: u64,
    pub(crate) tools: BTreeMap<String, ToolState>,
    /// Tool call ids in the order they started.
    order: Vec<String>,
}

const STATUS_DONE: &[&str] = &["completed", "failed"];

impl ToolState {
    fn merge(&mut self, update: &Value) {
        if let Some(kind) = str_field(update, "kind") {
            self.name = kind.to_owned();
        }
        if let Some(title) = str_field(update, "title") {
            self.title = Some(title.to_owned());
        }
        if let Some(status) = str_field(update, "status") {
            self.status = Some(status.to_owned());
        }
        if let Some(input) = update.get("rawInput").filter(|v| !v.is_null()) {
            self.raw_input = Some(input.clone());
        }
        if let Some(output) = update.get("rawOutput").filter(|v| !v.is_null()) {
            self.raw_output = Some(output.clone());
        }
        // Content and locations replace the earlier ones (ACP: "replaces").
        if let Some(content) = update.get("content").and_then(Value::as_array) {
            self.content = content.clone();
        }
        if let Some(locations) = update.get("locations").and_then(Value::as_array) {
            self.locations = locations.clone();
        }
    }

    /// The call's input: `rawInput`, or — when the agent sends none (Gemini CLI does not) —
    /// what it shows of the call, its title and locations.
    fn args(&self) -> Option<String> {
        match &self.raw_input {
            Some(input) => Some(input.to_string()),
            None if self.title.is_some() || !self.locations.is_empty() => {
                Some(json!({ "title": self.title, "locations": self.locations }).to_string())
            }
            None => None,
        }
    }

    /// The result as text: the text content blocks, else the raw output.
    fn output(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter(|c| str_field(c, "type") == Some("content"))
            .filter_map(|c| c.get("content"))
            .filter(|b| str_field(b, "type") == Some("text"))
            .filter_map(|b| str_field(b, "text"))
            .collect();
        if !texts.is_empty() {
            return texts.join("\n");
        }
        match &self.raw_output {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            // A file edit reports its diffs only: name what changed.
            None => self
                .content
                .iter()
                .filter(|c| str_field(c, "type") == Some("diff"))
                .filter_map(|c| str_field(c, "path"))
                .map(|path| format!("changed {path}"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Kind, title, status, locations and diffs: the data a tool item carries.
    fn data(&self) -> String {
        let diffs: Vec<Value> = self
            .content
            .iter()
            .filter(|c| str_field(c, "type") == Some("diff"))
            .map(|c| json!({ "path": c.get("path"), "oldText": c.get("oldText"), "newText": c.get("newText") }))
            .collect();
        let terminals: Vec<&Value> = self
            .content
            .iter()
            .filter(|c| str_field(c, "type") == Some("terminal"))
            .filter_map(|c| c.get("terminalId"))
            .collect();
        json!({
            "kind": self.name,
            "title": self.title,
            "status": self.status,
            "locations": self.locations,
            "diffs": diffs,
            "terminals": terminals,
        })
        .to_string()
    }
}

impl AcpSession {
    /// Map one `session/update` (its `update` object).
    pub(crate) fn session_update(&mut self, update: &Value, raw: &str, out: &mut Actions) {
        let kind = str_field(update, "sessionUpdate").unwrap_or_default();
        if let Some(usage) = update
            .get("_meta")
            .and_then(|m| m.get("usage"))
            .filter(|u| u.is_object())
        {
            self.add_update_usage(usage);
        }
        match kind {
            "agent_message_chunk" | "agent_thought_chunk" => {
                let thinking = kind == "agent_thought_chunk";
                let content = update.get("content").unwrap_or(&Value::Null);
                match (str_field(content, "type"), str_field(content, "text")) {
                    (Some("text"), Some(text)) => self.chunk(thinking, text, out),
                    // Images, audio and resources in a message: kept as data.
                    _ => out.vendor(&format!("acp/{kind}"), raw),
                }
            }
            "tool_call" => self.tool_call(update, out),
            "tool_call_update" => self.tool_call_update(update, raw, out),
            "usage_update" => {
                self.usage_update(update);
                out.vendor("acp/usage_update", raw);
            }
            // Plans, commands, modes, config options, session info, and whatever a newer
            // agent sends: vendor events, so nothing is dropped.
            other => {
                let name = if other.is_empty() { "unknown" } else { other };
                out.vendor(&format!("acp/{name}"), raw);
            }
        }
    }

    fn chunk(&mut self, thinking: bool, text: &str, out: &mut Actions) {
        // Agents send empty chunks (Qwen Code opens each message with one): nothing to add.
        if text.is_empty() {
            return;
        }
        if self
            .updates
            .part
            .as_ref()
            .is_some_and(|p| p.thinking != thinking)
        {
            self.close_part(out);
        }
        let scope = top_scope();
        if self.updates.part.is_none() {
            self.updates.parts += 1;
            let id = format!(
                "{}-{}",
                if thinking { "thought" } else { "message" },
                self.updates.parts
            );
            if thinking {
                out.thinking_start(&id, &scope);
            } else {
                out.text_start(&id, &scope);
            }
            self.updates.part = Some(Part {
                thinking,
                id,
                text: String::new(),
            });
        }
        let part = self.updates.part.as_mut().expect("an open part");
        part.text.push_str(text);
        if thinking {
            out.thinking_delta(&part.id, text, &scope);
        } else {
            out.text_delta(&part.id, text, &scope);
        }
    }

    /// End the open text or thought part and record it.
    pub(crate) fn close_part(&mut self, out: &mut Actions) {
        let Some(part) = self.updates.part.take() else {
            return;
        };
        let scope = top_scope();
        if part.thinking {
            out.thinking_end(&part.id, &scope);
            self.transcript
                .push(items::text(ItemKind::Thinking, &part.text), out);
        } else {
            out.text_end(&part.id, &scope);
            self.transcript
                .push(items::text(ItemKind::Assistant, &part.text), out);
            self.texts.push(part.text);
        }
    }

    fn tool_call(&mut self, update: &Value, out: &mut Actions) {
        let Some(id) = str_field(update, "toolCallId").map(str::to_owned) else {
            self.protocol_problem("a tool_call without toolCallId".into());
            return;
        };
        if self.updates.tools.contains_key(&id) {
            // A repeated announcement updates the call (some agents re-send it).
            let update = update.clone();
            self.tool_call_update(&update, "", out);
            return;
        }
        self.close_part(out);
        let mut tool = ToolState {
            name: "other".into(),
            title: None,
            status: None,
            raw_input: None,
            raw_output: None,
            content: Vec::new(),
            locations: Vec::new(),
            ended: false,
        };
        tool.merge(update);
        out.tool_start(&id, &tool.name, tool.args(), &top_scope());
        let mut item = items::tool_call(&id, &tool.name, tool.args());
        item.data_json = Some(tool.data());
        self.transcript.push(item, out);
        self.updates.order.push(id.clone());
        let done = tool
            .status
            .as_deref()
            .is_some_and(|s| STATUS_DONE.contains(&s));
        self.updates.tools.insert(id.clone(), tool);
        if done {
            self.finish_tool(&id, out);
        }
    }

    fn tool_call_update(&mut self, update: &Value, raw: &str, out: &mut Actions) {
        let Some(id) = str_field(update, "toolCallId").map(str::to_owned) else {
            self.protocol_problem("a tool_call_update without toolCallId".into());
            return;
        };
        let Some(tool) = self.updates.tools.get_mut(&id) else {
            // An update for a call this turn never announced: announce it now.
            let mut announced = update.clone();
            announced["sessionUpdate"] = json!("tool_call");
            self.tool_call(&announced, out);
            return;
        };
        if tool.ended {
            if !raw.is_empty() {
                out.vendor("acp/tool_call_update", raw);
            }
            return;
        }
        tool.merge(update);
        let done = tool
            .status
            .as_deref()
            .is_some_and(|s| STATUS_DONE.contains(&s));
        if done {
            self.finish_tool(&id, out);
        } else if !raw.is_empty() {
            out.vendor("acp/tool_call_update", raw);
        }
    }

    fn finish_tool(&mut self, id: &str, out: &mut Actions) {
        let Some(tool) = self.updates.tools.get_mut(id) else {
            return;
        };
        tool.ended = true;
        let tool = tool.clone();
        let scope = top_scope();
        let failed = tool.status.as_deref() == Some("failed");
        out.tool_end(id, &tool.name, tool.args(), &scope);
        let output = tool.output();
        out.tool_result(id, &output, failed, &scope);
        let mut item: TranscriptItem = items::tool_result(id, &output, failed);
        item.data_json = Some(tool.data());
        self.transcript.push(item, out);
    }

    /// End the turn's open part and every tool call still running (as failed: the turn
    /// ended before it finished).
    pub(crate) fn close_open(&mut self, out: &mut Actions) {
        self.close_part(out);
        for id in self.updates.order.clone() {
            if let Some(tool) = self.updates.tools.get_mut(&id)
                && !tool.ended
            {
                tool.status = Some("failed".into());
                tool.raw_output = Some(json!("the turn ended before the tool finished"));
                tool.content.clear();
                self.finish_tool(&id, out);
            }
        }
    }

    /// `usage_update`: the session's cumulative cost, when reported in US dollars.
    fn usage_update(&mut self, update: &Value) {
        let Some(cost) = update.get("cost").filter(|c| c.is_object()) else {
            return;
        };
        let (Some(amount), Some("USD")) = (
            cost.get("amount").and_then(Value::as_f64),
            str_field(cost, "currency"),
        ) else {
            return;
        };
        self.set_cost_total(amount);
    }
}
