//! One run's events as ACP `session/update` notifications (and the `_adaptor/event`
//! extension notification for what ACP has no update for).
//!
//! Owns the mapping only, as a pure function of the events seen so far in the run: no I/O,
//! no connection, no run. Must not: answer approvals (the server's approval handler does),
//! decide the prompt's stop reason, or drop an event without saying so — every event either
//! becomes an update, rides along as `_adaptor/event`, or is one of the two documented
//! exceptions (raw stdout/stderr chunks, whose content the other events already carry, and
//! approval requests, which become `session/request_permission`).

use std::collections::HashSet;

use adaptor::{Event, ItemKind, Phase, ProcessInfoKind, Usage};
use agent_client_protocol::v1::schema::SessionUpdate;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost, Notice, NoticeSeverity, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, TextContent, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind, UsageUpdate,
};
use serde_json::Value;

/// The extension notification that carries an event ACP has no update for: its params are
/// `{"sessionId": …, "event": <the event as `adaptor run --json` prints it>}`.
pub const EVENT_EXTENSION: &str = "_adaptor/event";

/// What one event becomes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outgoing {
    /// A `session/update`.
    Update(Box<SessionUpdate>),
    /// An `_adaptor/event` notification with this event.
    Extension(Value),
}

/// The state a run's mapping keeps: which text and tool calls the client has already seen,
/// so that a transcript item repeats nothing the deltas carried, and supplies what they did
/// not (a driver without token streaming reports its text only as items).
#[derive(Debug, Default)]
pub(crate) struct UpdateMapper {
    text_streamed: bool,
    thought_streamed: bool,
    announced_calls: HashSet<String>,
    finished_calls: HashSet<String>,
}

impl UpdateMapper {
    /// The notifications for `event`, in order.
    pub(crate) fn map(&mut self, event: &Event) -> Vec<Outgoing> {
        let mut out = Vec::new();
        match event {
            Event::TextDelta(d) => {
                if d.phase == Phase::Delta && !d.text.is_empty() {
                    self.text_streamed = true;
                    out.push(update(SessionUpdate::AgentMessageChunk(chunk(&d.text))));
                }
            }
            Event::Thinking(d) => {
                if d.phase == Phase::Delta && !d.text.is_empty() {
                    self.thought_streamed = true;
                    out.push(update(SessionUpdate::AgentThoughtChunk(chunk(&d.text))));
                }
            }
            Event::ToolCall(call) => match call.phase {
                Phase::Start => self.announce(&call.id, &call.name, call.args.as_ref(), &mut out),
                // ACP has no argument fragments: the complete arguments follow at the end.
                Phase::Delta => {}
                Phase::End => {
                    if !self.announced_calls.contains(&call.id) {
                        self.announce(&call.id, &call.name, call.args.as_ref(), &mut out);
                    } else if let Some(args) = &call.args {
                        // The arguments were streamed: now the title can name them too.
                        out.push(update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                            call.id.clone(),
                            ToolCallUpdateFields::new()
                                .title(title(&call.name, Some(args)))
                                .raw_input(args.clone()),
                        ))));
                    }
                    if let Some(plan) = plan_from_todo_tool(&call.name, call.args.as_ref()) {
                        out.push(update(SessionUpdate::Plan(plan)));
                    }
                }
            },
            Event::ToolResult(r) => self.finish(&r.id, &r.output, r.is_error, &mut out),
            Event::Item(item) => {
                let item = &item.item;
                match &item.kind {
                    ItemKind::Assistant => {
                        if !std::mem::take(&mut self.text_streamed)
                            && let Some(text) = item.text.as_deref().filter(|t| !t.is_empty())
                        {
                            out.push(update(SessionUpdate::AgentMessageChunk(chunk(text))));
                        }
                    }
                    ItemKind::Thinking => {
                        if !std::mem::take(&mut self.thought_streamed)
                            && let Some(text) = item.text.as_deref().filter(|t| !t.is_empty())
                        {
                            out.push(update(SessionUpdate::AgentThoughtChunk(chunk(text))));
                        }
                    }
                    ItemKind::ToolCall => {
                        if let Some(id) = &item.tool_call_id
                            && !self.announced_calls.contains(id)
                        {
                            let name = item.tool_name.as_deref().unwrap_or("tool");
                            self.announce(id, name, item.input.as_ref(), &mut out);
                        }
                    }
                    ItemKind::ToolResult => {
                        if let Some(id) = &item.tool_call_id
                            && !self.finished_calls.contains(id)
                        {
                            let text = item.text.clone().unwrap_or_default();
                            self.finish(id, &text, item.is_error, &mut out);
                        }
                    }
                    // The prompt is the client's own; the rest (init, result, stdout lines, …)
                    // has no update of its own.
                    ItemKind::User => {}
                    _ => out.push(extension(event)),
                }
            }
            Event::Usage(u) => out.push(update(SessionUpdate::UsageUpdate(usage_update(&u.usage)))),
            Event::Notice(n) => out.push(update(SessionUpdate::Notice(notice(
                NoticeSeverity::Info,
                &n.notice,
                Some(&n.message),
            )))),
            Event::ThreadFallback(f) => out.push(update(SessionUpdate::Notice(notice(
                NoticeSeverity::Warning,
                "The stored session could not be resumed; a new one was started",
                Some(&f.reason),
            )))),
            Event::Dropped(d) => out.push(update(SessionUpdate::Notice(notice(
                NoticeSeverity::Warning,
                &format!("{} events were dropped (the consumer was slow)", d.count),
                None,
            )))),
            Event::Vendor(v) => {
                if (v.name == "acp/plan" || v.name == "todo_list")
                    && let Some(plan) = plan_from_vendor(&v.name, &v.json)
                {
                    out.push(update(SessionUpdate::Plan(plan)));
                }
                out.push(extension(event));
            }
            // Raw output: the other events carry its content (the run's raw streams keep it).
            Event::ProcessInfo(p)
                if matches!(p.process, ProcessInfoKind::Stdout | ProcessInfoKind::Stderr) => {}
            // Answered through `session/request_permission` by the server's handler.
            Event::ApprovalRequest(_) => {}
            // The prompt's request and response are the run's start and end.
            Event::RunStarted(_) | Event::RunFinished(_) => {}
            _ => out.push(extension(event)),
        }
        out
    }

    fn announce(&mut self, id: &str, name: &str, args: Option<&Value>, out: &mut Vec<Outgoing>) {
        self.announced_calls.insert(id.to_owned());
        let mut call = ToolCall::new(id.to_owned(), title(name, args))
            .name(name.to_owned())
            .kind(tool_kind(name))
            .status(ToolCallStatus::InProgress);
        if let Some(args) = args {
            call = call.raw_input(args.clone());
        }
        out.push(update(SessionUpdate::ToolCall(call)));
    }

    fn finish(&mut self, id: &str, output: &str, is_error: bool, out: &mut Vec<Outgoing>) {
        if !self.announced_calls.contains(id) {
            self.announce(id, "tool", None, out);
        }
        self.finished_calls.insert(id.to_owned());
        let status = if is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        };
        let mut fields = ToolCallUpdateFields::new()
            .status(status)
            .raw_output(Value::String(output.to_owned()));
        if !output.is_empty() {
            fields = fields.content(vec![ContentBlock::from(output.to_owned()).into()]);
        }
        out.push(update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            fields,
        ))));
    }
}

fn update(update: SessionUpdate) -> Outgoing {
    Outgoing::Update(Box::new(update))
}

fn extension(event: &Event) -> Outgoing {
    Outgoing::Extension(crate::event_json(event))
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text.to_owned())))
}

fn notice(severity: NoticeSeverity, title: &str, description: Option<&str>) -> Notice {
    let title = if title.trim().is_empty() {
        "notice"
    } else {
        title
    };
    let mut notice = Notice::new(severity, title.to_owned());
    notice.description = description.filter(|d| !d.is_empty()).map(str::to_owned);
    notice
}

/// ACP's `usage_update` counts the tokens in the context window: here every input, cache
/// and output token of the run so far. `size` is 0 — no driver reports its model's window.
pub(crate) fn usage_update(usage: &Usage) -> UsageUpdate {
    let used = [
        usage.input_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.output_tokens,
    ]
    .into_iter()
    .flatten()
    .fold(0u64, u64::saturating_add);
    let mut update = UsageUpdate::new(used, 0);
    update.cost = usage.cost_usd.map(|usd| Cost::new(usd, "USD"));
    update
}

/// The ACP tool kind for a tool name of the CLIs we drive.
pub(crate) fn tool_kind(name: &str) -> ToolKind {
    let lower = name.to_ascii_lowercase();
    let base = lower.rsplit(['/', '.', ':']).next().unwrap_or(&lower);
    match base {
        "read" | "read_file" | "view" | "notebookread" | "ls" => ToolKind::Read,
        "edit" | "write" | "multiedit" | "notebookedit" | "apply_patch" | "file_change"
        | "write_file" | "replace" => ToolKind::Edit,
        "bash" | "shell" | "command_execution" | "exec" | "exec_command" | "run_shell_command"
        | "bashoutput" => ToolKind::Execute,
        "grep" | "glob" | "search" | "search_file_content" | "find" => ToolKind::Search,
        "webfetch" | "web_fetch" | "websearch" | "web_search" | "fetch" => ToolKind::Fetch,
        "think" | "task" | "todowrite" => ToolKind::Think,
        "delete" | "rm" => ToolKind::Delete,
        "move" | "mv" => ToolKind::Move,
        _ => ToolKind::Other,
    }
}

/// A title for humans: the tool's name and its main argument (a command, a path, a query).
pub(crate) fn title(name: &str, args: Option<&Value>) -> String {
    let main = args.and_then(|a| {
        [
            "command",
            "file_path",
            "path",
            "pattern",
            "query",
            "url",
            "description",
        ]
        .iter()
        .find_map(|k| a.get(*k).and_then(Value::as_str))
    });
    match main {
        Some(main) => {
            let line = main.lines().next().unwrap_or_default();
            let short: String = line.chars().take(80).collect();
            format!("{name}: {short}")
        }
        None => name.to_owned(),
    }
}

/// Claude Code's `TodoWrite` tool: its `todos` are the agent's plan.
fn plan_from_todo_tool(name: &str, args: Option<&Value>) -> Option<Plan> {
    if !name.eq_ignore_ascii_case("todowrite") {
        return None;
    }
    let todos = args?.get("todos")?.as_array()?;
    let entries = todos
        .iter()
        .filter_map(|t| {
            let content = t.get("content").and_then(Value::as_str)?;
            Some(PlanEntry::new(
                content.to_owned(),
                PlanEntryPriority::Medium,
                entry_status(t.get("status").and_then(Value::as_str)),
            ))
        })
        .collect();
    Some(Plan::new(entries))
}

/// An ACP agent's own plan (`acp/plan`, passed on as it came) or Codex's todo list.
fn plan_from_vendor(name: &str, json: &Value) -> Option<Plan> {
    if name == "acp/plan" {
        return serde_json::from_value(json.clone()).ok();
    }
    let items = json.get("items")?.as_array()?;
    let entries = items
        .iter()
        .filter_map(|i| {
            let text = i.get("text").and_then(Value::as_str)?;
            let done = i.get("completed").and_then(Value::as_bool).unwrap_or(false);
            Some(PlanEntry::new(
                text.to_owned(),
                PlanEntryPriority::Medium,
                if done {
                    PlanEntryStatus::Completed
                } else {
                    PlanEntryStatus::Pending
                },
            ))
        })
        .collect();
    Some(Plan::new(entries))
}

fn entry_status(status: Option<&str>) -> PlanEntryStatus {
    match status {
        Some("completed") => PlanEntryStatus::Completed,
        Some("in_progress") => PlanEntryStatus::InProgress,
        _ => PlanEntryStatus::Pending,
    }
}
