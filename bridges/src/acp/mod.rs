//! An [`Agent`] served as an Agent Client Protocol agent: editors (Zed, JetBrains, Neovim
//! clients) talk ACP to it over stdio, and every prompt is one run of the agent's driver,
//! with the agent's threads, policy and approvals behind it.
//!
//! Owns the protocol side only, on the official ACP Rust SDK (`agent-client-protocol`):
//! sessions ↔ thread keys, prompts → runs, events → `session/update` (through
//! [`updates`]), approvals → `session/request_permission`, `session/cancel` → the run's
//! cancel, the run's outcome → the stop reason. Must not: call a driver, spawn a process,
//! coordinate threads or decide an approval itself — it consumes the public `Agent` /
//! `Thread` / `Stream` / `Event` / `RunResult` API only.
//!
//! # The mapping
//!
//! | ACP | agent-adaptor |
//! |---|---|
//! | `initialize` | capabilities from the driver's descriptor: `loadSession` and `sessionCapabilities.resume` when its sessions resume, `mcpCapabilities` from its MCP transports, `promptCapabilities.embeddedContext` |
//! | `session/new` | a new session id; its thread key is `acp:<id>`; `cwd` → the run's workspace, `mcpServers` → the run's MCP servers |
//! | `session/load`, `session/resume` | the same thread key (a stored thread, or a session of this server); `load` replays the updates this server sent for it |
//! | `session/prompt` | one run of `agent.thread("acp:<id>")`, text and embedded text resources joined into the prompt |
//! | `session/update` | text and thought chunks, tool calls and their updates, plans (Claude's `TodoWrite`, Codex's todo list, an ACP agent's plan), `usage_update`, notices; anything else as `_adaptor/event` |
//! | `session/request_permission` | every approval request: answered once, from the option the client selected; a cancelled or failed request is a denial |
//! | `session/cancel` | the run's cancel |
//! | stop reason | `end_turn`; `cancelled`; `max_turn_requests` (max turns); `max_tokens` (context limit); any other failure is a JSON-RPC error carrying the failure reason |

pub mod updates;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use adaptor::{
    Agent, ApprovalHandler, ApprovalKind, ApprovalRequest, Canceller, Error, FailureReason, Mcp,
    RunOptions,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, EmbeddedResourceResource, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest,
    NewSessionResponse, Notice, NoticeSeverity, PermissionOption, PermissionOptionKind,
    PromptCapabilities, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities,
    SessionCloseCapabilities, SessionId, SessionNotification, SessionResumeCapabilities,
    SessionUpdate, StopReason, TextContent, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Client, ConnectTo, Responder, UntypedMessage, V1};
use futures::StreamExt;
use serde_json::json;

use updates::{EVENT_EXTENSION, Outgoing, UpdateMapper};

/// The prefix of the thread keys of ACP sessions (`acp:<session id>`): a namespace of its own,
/// so an ACP session never shares a thread with another user of the same store.
pub const THREAD_KEY_PREFIX: &str = "acp:";

/// The most `session/update` notifications a session keeps for `session/load` to replay;
/// older ones are dropped first, and the replay then starts with a notice saying so.
pub const MAX_REPLAYED_UPDATES: usize = 10_000;

/// Why a connection ended badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcpServeError {
    /// The JSON-RPC connection failed (transport closed mid-message, invalid framing…).
    #[error("ACP connection: {0}")]
    Connection(#[from] agent_client_protocol::Error),
}

/// An [`Agent`] as an ACP agent. Build it, then [`serve_stdio`](Self::serve_stdio) (what
/// `adaptor acp` does), [`serve`](Self::serve) any transport, or connect
/// [`into_component`](Self::into_component) to a client in-process.
#[derive(Clone)]
pub struct AcpServer {
    agent: Agent,
    options: RunOptions,
}

impl std::fmt::Debug for AcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpServer")
            .field("driver", &self.agent.driver().descriptor().name)
            .finish_non_exhaustive()
    }
}

impl AcpServer {
    /// Serve `agent`. Give it a thread store
    /// ([`AgentBuilder::thread_store`](adaptor::AgentBuilder::thread_store)) for sessions
    /// that outlive the server process; without one, sessions live as long as the agent.
    pub fn new(agent: Agent) -> Self {
        Self {
            agent,
            options: RunOptions::new(),
        }
    }

    /// The options every prompt's run starts from (model, policy, timeout…). The server sets
    /// the workspace, MCP servers and approval handler of each run from its session.
    pub fn run_options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    /// Serve one client on stdin/stdout until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), AcpServeError> {
        self.serve(agent_client_protocol::Stdio::new()).await
    }

    /// Serve one client on `transport` until it disconnects. Every run still going is
    /// cancelled when the connection ends.
    pub async fn serve(
        self,
        transport: impl ConnectTo<agent_client_protocol::Agent> + 'static,
    ) -> Result<(), AcpServeError> {
        let state = Arc::new(State::new(self));
        let served = ConnectTo::<Client>::connect_to(component(state.clone()), transport).await;
        state.cancel_all();
        served.map_err(AcpServeError::from)
    }

    /// The server as an ACP component, for a client in the same process
    /// (`Client.v1().connect_with(server.into_component(), …)`).
    pub fn into_component(self) -> impl ConnectTo<Client> {
        component(Arc::new(State::new(self)))
    }
}

/// The server's state, shared by its handlers.
struct State {
    agent: Agent,
    options: RunOptions,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// One ACP session: a thread key and what each prompt's run needs.
struct Session {
    id: SessionId,
    key: String,
    setup: Mutex<Setup>,
    turn: Mutex<Option<Turn>>,
    history: Mutex<History>,
}

struct Setup {
    cwd: PathBuf,
    mcp: Vec<Mcp>,
}

/// The prompt in progress.
#[derive(Default)]
struct Turn {
    canceller: Option<Canceller>,
    cancel_requested: bool,
}

#[derive(Default)]
struct History {
    updates: std::collections::VecDeque<SessionUpdate>,
    truncated: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    fn new(server: AcpServer) -> Self {
        Self {
            agent: server.agent,
            options: server.options,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, agent_client_protocol::Error> {
        lock(&self.sessions)
            .get(&*id.0)
            .cloned()
            .ok_or_else(|| unknown_session(id))
    }

    fn insert(&self, id: SessionId, setup: Setup) -> Arc<Session> {
        let session = Arc::new(Session {
            key: format!("{THREAD_KEY_PREFIX}{}", id.0),
            id: id.clone(),
            setup: Mutex::new(setup),
            turn: Mutex::new(None),
            history: Mutex::new(History::default()),
        });
        lock(&self.sessions).insert(id.0.to_string(), session.clone());
        session
    }

    fn cancel_all(&self) {
        for session in lock(&self.sessions).values() {
            session.cancel();
        }
    }

    fn capabilities(&self) -> AgentCapabilities {
        let d = self.agent.driver().descriptor();
        let mut sessions = SessionCapabilities::new().close(SessionCloseCapabilities::new());
        if d.sessions.resume {
            sessions = sessions.resume(SessionResumeCapabilities::new());
        }
        AgentCapabilities::new()
            .load_session(d.sessions.resume)
            .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
            .mcp_capabilities(McpCapabilities::new().http(d.mcp.http).sse(d.mcp.sse))
            .session_capabilities(sessions)
    }

    /// `session/load` and `session/resume`: a session of this server, or a stored thread.
    async fn reopen(
        &self,
        id: &SessionId,
        cwd: PathBuf,
        servers: Vec<McpServer>,
    ) -> Result<(Arc<Session>, bool), agent_client_protocol::Error> {
        let setup = self.setup(cwd, servers)?;
        if let Ok(session) = self.session(id) {
            *lock(&session.setup) = setup;
            return Ok((session, true));
        }
        if !is_session_id(&id.0) {
            return Err(unknown_session(id));
        }
        let key = format!("{THREAD_KEY_PREFIX}{}", id.0);
        match self.agent.thread(key).record().await {
            Ok(Some(_)) => Ok((self.insert(id.clone(), setup), false)),
            Ok(None) => Err(unknown_session(id)),
            Err(e) => Err(internal(&e)),
        }
    }

    fn setup(
        &self,
        cwd: PathBuf,
        servers: Vec<McpServer>,
    ) -> Result<Setup, agent_client_protocol::Error> {
        if !cwd.is_absolute() {
            return Err(invalid_params(format!(
                "cwd must be an absolute path, not {}",
                cwd.display()
            )));
        }
        let mcp = servers
            .into_iter()
            .map(mcp_server)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Setup { cwd, mcp })
    }
}

impl Session {
    fn cancel(&self) {
        if let Some(turn) = lock(&self.turn).as_mut() {
            turn.cancel_requested = true;
            if let Some(c) = &turn.canceller {
                c.cancel();
            }
        }
    }

    fn remember(&self, update: &SessionUpdate) {
        let mut history = lock(&self.history);
        if history.updates.len() == MAX_REPLAYED_UPDATES {
            history.updates.pop_front();
            history.truncated = true;
        }
        history.updates.push_back(update.clone());
    }

    fn replay(&self, known_here: bool) -> Vec<SessionUpdate> {
        let history = lock(&self.history);
        let mut out = Vec::new();
        let gap = if !known_here {
            Some("The conversation so far is not available: this server did not serve it")
        } else if history.truncated {
            Some("The start of the conversation is not available: only the latest updates are kept")
        } else {
            None
        };
        if let Some(title) = gap {
            out.push(SessionUpdate::Notice(Notice::new(
                NoticeSeverity::Info,
                title.to_owned(),
            )));
        }
        out.extend(history.updates.iter().cloned());
        out
    }
}

/// The ACP component: the handlers over `state`.
fn component(state: Arc<State>) -> impl ConnectTo<Client> {
    let initialize = state.clone();
    let new_session = state.clone();
    let load = state.clone();
    let resume = state.clone();
    let prompt = state.clone();
    let cancel = state.clone();
    let close = state;
    agent_client_protocol::Agent
        .v1()
        .name("adaptor")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: Responder<InitializeResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                let d = initialize.agent.driver().descriptor();
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(initialize.capabilities())
                        .agent_info(
                            Implementation::new(
                                format!("adaptor/{}", d.name),
                                env!("CARGO_PKG_VERSION"),
                            )
                            .title(format!("{} (agent-adaptor)", d.display_name)),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                if let Err(e) = refuse_unsupported(&req.additional_directories, req.system_prompt.is_some()) {
                    return responder.respond_with_error(e);
                }
                match new_session.setup(req.cwd, req.mcp_servers) {
                    Ok(setup) => {
                        let session = new_session.insert(new_session_id(), setup);
                        responder.respond(NewSessionResponse::new(session.id.clone()))
                    }
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse, V1>,
                        cx: ConnectionTo<Client>| {
                if let Err(e) = refuse_unsupported(&req.additional_directories, req.system_prompt.is_some()) {
                    return responder.respond_with_error(e);
                }
                let load = load.clone();
                cx.spawn({
                    let cx = cx.clone();
                    async move {
                        match load.reopen(&req.session_id, req.cwd, req.mcp_servers).await {
                            Ok((session, known)) => {
                                for update in session.replay(known) {
                                    if let Err(e) = cx.send_notification(SessionNotification::new(
                                        session.id.clone(),
                                        update,
                                    )) {
                                        tracing::warn!("session/load replay: {e}");
                                        break;
                                    }
                                }
                                answer(responder.respond(LoadSessionResponse::new()))
                            }
                            Err(e) => answer(responder.respond_with_error(e)),
                        }
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest,
                        responder: Responder<ResumeSessionResponse, V1>,
                        cx: ConnectionTo<Client>| {
                if let Err(e) = refuse_unsupported(&req.additional_directories, req.system_prompt.is_some()) {
                    return responder.respond_with_error(e);
                }
                let resume = resume.clone();
                cx.spawn(async move {
                    match resume.reopen(&req.session_id, req.cwd, req.mcp_servers).await {
                        Ok(_) => answer(responder.respond(ResumeSessionResponse::new())),
                        Err(e) => answer(responder.respond_with_error(e)),
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse, V1>,
                        cx: ConnectionTo<Client>| {
                let session = match prompt.session(&req.session_id) {
                    Ok(s) => s,
                    Err(e) => return responder.respond_with_error(e),
                };
                let text = match prompt_text(&req.prompt) {
                    Ok(t) => t,
                    Err(e) => return responder.respond_with_error(e),
                };
                {
                    let mut turn = lock(&session.turn);
                    if turn.is_some() {
                        return responder.respond_with_error(invalid_request(
                            "a prompt is already running in this session: cancel it or wait for its response",
                        ));
                    }
                    *turn = Some(Turn::default());
                }
                let state = prompt.clone();
                cx.spawn({
                    let cx = cx.clone();
                    async move {
                        let outcome = run_prompt(&state, &session, req.prompt, text, &cx).await;
                        *lock(&session.turn) = None;
                        answer(match outcome {
                            Ok(stop) => responder.respond(PromptResponse::new(stop)),
                            Err(e) => responder.respond_with_error(e),
                        })
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest,
                        responder: Responder<CloseSessionResponse, V1>,
                        _cx: ConnectionTo<Client>| {
                match close.session(&req.session_id) {
                    Ok(session) => {
                        session.cancel();
                        lock(&close.sessions).remove(&*req.session_id.0);
                        responder.respond(CloseSessionResponse::new())
                    }
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx: ConnectionTo<Client>| {
                if let Ok(session) = cancel.session(&n.session_id) {
                    session.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
}

/// A response that could not be sent means the client is gone; the connection ends by
/// itself, so the task ends quietly (an `Err` would tear the connection down early).
fn answer(
    sent: Result<(), agent_client_protocol::Error>,
) -> Result<(), agent_client_protocol::Error> {
    if let Err(e) = sent {
        tracing::debug!("ACP response not delivered: {e}");
    }
    Ok(())
}

/// One prompt: one run of the session's thread, its events sent as updates as they come.
async fn run_prompt(
    state: &State,
    session: &Session,
    prompt: Vec<ContentBlock>,
    text: String,
    cx: &ConnectionTo<Client>,
) -> Result<StopReason, agent_client_protocol::Error> {
    for block in prompt {
        session.remember(&SessionUpdate::UserMessageChunk(ContentChunk::new(block)));
    }
    let (cwd, mcp) = {
        let setup = lock(&session.setup);
        (setup.cwd.clone(), setup.mcp.clone())
    };
    let mut options = state
        .options
        .clone()
        .workspace(cwd)
        .approval_handler(permission_handler(cx.clone(), session.id.clone()));
    if !mcp.is_empty() {
        options = options.mcp(mcp);
    }
    let mut stream = state
        .agent
        .thread(session.key.clone())
        .stream_with(text, options);
    {
        let mut turn = lock(&session.turn);
        let turn = turn.get_or_insert_with(Turn::default);
        if turn.cancel_requested {
            stream.cancel();
        }
        turn.canceller = Some(stream.canceller());
    }
    let mut mapper = UpdateMapper::default();
    let mut client_gone = false;
    while let Some(event) = stream.next().await {
        if client_gone {
            continue;
        }
        for out in mapper.map(&event) {
            let sent = match out {
                Outgoing::Update(update) => {
                    session.remember(&update);
                    cx.send_notification(SessionNotification::new(session.id.clone(), *update))
                }
                Outgoing::Extension(event) => UntypedMessage::new(
                    EVENT_EXTENSION,
                    json!({"sessionId": session.id, "event": event}),
                )
                .and_then(|m| cx.send_notification(m)),
            };
            if let Err(e) = sent {
                tracing::debug!("ACP client gone, cancelling the run: {e}");
                client_gone = true;
                stream.cancel();
                break;
            }
        }
    }
    match stream.result().await {
        Ok(_) => Ok(StopReason::EndTurn),
        Err(Error::Run(e)) => match e.reason {
            FailureReason::Cancelled => Ok(StopReason::Cancelled),
            FailureReason::MaxTurns => Ok(StopReason::MaxTurnRequests),
            FailureReason::ContextLimit => Ok(StopReason::MaxTokens),
            reason => Err(agent_client_protocol::Error::internal_error()
                .data(json!({"reason": reason, "message": e.message, "details": e.details}))),
        },
        Err(e) => Err(internal(&e)),
    }
}

/// Every approval request of a run, asked of the client with `session/request_permission`.
/// The request is answered once, from the option the client selected; a cancelled or failed
/// request, or an option the request did not offer, is a denial — never consent.
fn permission_handler(cx: ConnectionTo<Client>, session_id: SessionId) -> ApprovalHandler {
    ApprovalHandler::new(move |request: ApprovalRequest| {
        let cx = cx.clone();
        let session_id = session_id.clone();
        async move {
            let options = permission_options(&request);
            let tool_call_id = request
                .tool_call_id
                .clone()
                .unwrap_or_else(|| format!("approval-{}", request.id));
            let mut fields = ToolCallUpdateFields::new().title(request.title.clone());
            if let Some(details) = &request.details {
                fields = fields.raw_input(details.clone());
            }
            let asked = cx
                .send_request(RequestPermissionRequest::new(
                    session_id,
                    ToolCallUpdate::new(tool_call_id, fields),
                    options,
                ))
                .block_task()
                .await;
            let answered = match asked {
                Ok(response) => match response.outcome {
                    RequestPermissionOutcome::Selected(selected) => {
                        apply_choice(&request, &selected.option_id.0)
                    }
                    RequestPermissionOutcome::Cancelled => {
                        request.deny("the ACP client cancelled the permission request")
                    }
                    _ => request.deny("the ACP client gave an outcome this server does not know"),
                },
                Err(e) => request.deny(format!("the ACP client did not answer: {e}")),
            };
            if let Err(e) = answered {
                // Already resolved (a timeout or the end of the run came first).
                tracing::debug!("approval {} not answered: {e}", request.id);
            }
        }
    })
}

/// The option ids offered for a request: `allow` / `reject`, or a question's choices plus
/// `reject` to decline it.
pub(crate) fn permission_options(request: &ApprovalRequest) -> Vec<PermissionOption> {
    let reject = PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce);
    match &request.kind {
        ApprovalKind::Question if !request.choices.is_empty() => {
            let mut options: Vec<PermissionOption> = request
                .choices
                .iter()
                .map(|c| {
                    PermissionOption::new(
                        format!("answer:{}", c.key),
                        c.label.clone(),
                        PermissionOptionKind::AllowOnce,
                    )
                })
                .collect();
            options.push(PermissionOption::new(
                "reject",
                "Decline",
                PermissionOptionKind::RejectOnce,
            ));
            options
        }
        // A free-text question has no answer an ACP client can give: it can only decline.
        ApprovalKind::Question => vec![PermissionOption::new(
            "reject",
            "Decline",
            PermissionOptionKind::RejectOnce,
        )],
        ApprovalKind::PlanReview => vec![
            PermissionOption::new("allow", "Approve the plan", PermissionOptionKind::AllowOnce),
            reject,
        ],
        _ => vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            reject,
        ],
    }
}

fn apply_choice(request: &ApprovalRequest, option: &str) -> Result<(), adaptor::ApprovalError> {
    let is_question = matches!(request.kind, ApprovalKind::Question);
    match option.strip_prefix("answer:") {
        _ if option == "reject" => request.deny("rejected in the ACP client"),
        _ if option == "allow" && !is_question => request.approve(),
        Some(key) if request.choices.iter().any(|c| c.key == key) => request.answer(key),
        _ => request.deny(format!(
            "the ACP client selected `{option}`, which was not offered"
        )),
    }
}

/// The prompt as text: text blocks as they are, resource links as a line naming them, and
/// embedded text resources fenced with their URI. Images, audio and binary resources are
/// refused (the server does not advertise them).
pub(crate) fn prompt_text(prompt: &[ContentBlock]) -> Result<String, agent_client_protocol::Error> {
    let mut parts = Vec::new();
    for block in prompt {
        match block {
            ContentBlock::Text(TextContent { text, .. }) => parts.push(text.clone()),
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[{}]({})", link.name, link.uri))
            }
            ContentBlock::Resource(resource) => match &resource.resource {
                EmbeddedResourceResource::TextResourceContents(t) => parts.push(format!(
                    "<resource uri=\"{}\">\n{}\n</resource>",
                    t.uri, t.text
                )),
                _ => {
                    return Err(invalid_params(
                        "binary resources are not supported in a prompt",
                    ));
                }
            },
            ContentBlock::Image(_) => {
                return Err(invalid_params(
                    "images are not supported in a prompt (promptCapabilities.image is false)",
                ));
            }
            ContentBlock::Audio(_) => {
                return Err(invalid_params(
                    "audio is not supported in a prompt (promptCapabilities.audio is false)",
                ));
            }
            _ => {
                return Err(invalid_params(
                    "a content block of a kind this server does not know",
                ));
            }
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(invalid_params("the prompt has no text"));
    }
    Ok(text)
}

fn refuse_unsupported(
    additional_directories: &[PathBuf],
    system_prompt: bool,
) -> Result<(), agent_client_protocol::Error> {
    if !additional_directories.is_empty() {
        return Err(invalid_params(
            "additionalDirectories are not supported (sessionCapabilities.additionalDirectories is not advertised)",
        ));
    }
    if system_prompt {
        return Err(invalid_params(
            "systemPrompt is not supported (sessionCapabilities.systemPrompt is not advertised)",
        ));
    }
    Ok(())
}

/// An ACP MCP server declaration as the run's.
pub(crate) fn mcp_server(server: McpServer) -> Result<Mcp, agent_client_protocol::Error> {
    Ok(match server {
        McpServer::Stdio(s) => {
            let command = path_text(&s.command)?;
            let mut stdio = Mcp::stdio(s.name, command).args(s.args);
            for var in s.env {
                stdio = stdio.env(var.name, var.value);
            }
            stdio.into()
        }
        McpServer::Http(h) => {
            let mut http = Mcp::http(h.name, h.url);
            for header in h.headers {
                http = http.header(header.name, header.value);
            }
            http.into()
        }
        McpServer::Sse(h) => {
            let mut sse = Mcp::sse(h.name, h.url);
            for header in h.headers {
                sse = sse.header(header.name, header.value);
            }
            sse.into()
        }
        _ => {
            return Err(invalid_params(
                "an MCP server transport this server does not know",
            ));
        }
    })
}

fn path_text(path: &Path) -> Result<String, agent_client_protocol::Error> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid_params(format!("MCP command {} is not UTF-8", path.display())))
}

/// A new session id: 32 hex digits, from the process's random hasher keys, the time and a
/// counter (unique within the process, unguessable enough to name a thread).
fn new_session_id() -> SessionId {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut words = [0u64; 2];
    for (i, word) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(now);
        h.write_u64(n);
        h.write_usize(i);
        h.write_u32(std::process::id());
        *word = h.finish();
    }
    SessionId::new(format!("{:016x}{:016x}", words[0], words[1]))
}

/// Whether `id` has the form of this server's session ids (so a stored thread can be found
/// for it, and no other client's key can be named).
fn is_session_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn unknown_session(id: &SessionId) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(-32002, format!("no session `{}`", id.0))
}

fn invalid_params(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(json!({"message": message.into()}))
}

fn invalid_request(message: &str) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_request().data(json!({"message": message}))
}

fn internal(e: &Error) -> agent_client_protocol::Error {
    agent_client_protocol::Error::internal_error().data(json!({"message": e.to_string()}))
}

#[cfg(test)]
mod tests;
