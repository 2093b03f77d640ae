//! Host-defined tools: functions of the embedding application that the agent's CLI may call.
//!
//! A [`Tool`] is a name, a description, JSON Schemas for its input and output (derived with
//! `schemars` from the handler's types, or given by hand) and an async handler. The set given
//! to [`AgentBuilder::tools`](crate::AgentBuilder::tools) is served to the provider by one MCP
//! server per agent (`server`, the only module that names `rmcp` or `axum`); the caller never
//! sees MCP.
//!
//! This file owns the vocabulary — [`Tool`], [`ToolError`], the set's checks and fingerprint —
//! and the call path of one invocation (decode the arguments, run the handler, catch panics,
//! sanitise failures). Must not: do network I/O (see `server`), or know any CLI.

pub(crate) mod server;

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The longest tool name accepted (Claude Code names a host tool `mcp__<server>__<tool>` and
/// model APIs cap tool names at 64 characters).
pub const MAX_TOOL_NAME: usize = 40;

type Handler = dyn Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync;

/// A host function the agent may call, served to the CLI over MCP.
///
/// ```
/// use adaptor::{Tool, ToolError};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct LookupInput {
///     /// The issue number.
///     number: u64,
/// }
///
/// #[derive(Serialize, JsonSchema)]
/// struct Issue {
///     title: String,
/// }
///
/// let tool = Tool::define("lookup_issue", "Look up an issue by number", |input: LookupInput| async move {
///     if input.number == 0 {
///         return Err(ToolError::reject("not_found", "there is no issue 0"));
///     }
///     Ok(Issue { title: format!("Issue {}", input.number) })
/// })
/// .read_only()
/// .idempotent()
/// .revision("lookup_issue/v1");
/// assert_eq!(tool.name(), "lookup_issue");
/// ```
///
/// Tools are set once, on the builder ([`AgentBuilder::tools`](crate::AgentBuilder::tools));
/// there is no per-call tool set:
///
/// ```compile_fail
/// let _ = adaptor::RunOptions::new().tools(Vec::<adaptor::Tool>::new());
/// ```
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    read_only: bool,
    idempotent: bool,
    revision: Option<String>,
    handler: Arc<Handler>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("revision", &self.revision)
            .field("read_only", &self.read_only)
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Tool {
    /// Two tools are equal when they are the same definition (clones of one `Tool`).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.handler, &other.handler)
    }
}

impl Tool {
    /// A tool whose input and output schemas come from the handler's types (`schemars`).
    ///
    /// The model's arguments are decoded into `I`; arguments that do not decode reach the
    /// model as a tool error naming what was wrong, and the handler is not called.
    pub fn define<I, O, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Tool
    where
        I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        O: Serialize + schemars::JsonSchema + 'static,
        F: Fn(I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let erased = move |args: Value| -> BoxFuture<'static, Result<Value, ToolError>> {
            let input = match serde_json::from_value::<I>(args) {
                Ok(input) => input,
                Err(e) => {
                    let message = format!("the arguments do not match the input schema: {e}");
                    return Box::pin(
                        async move { Err(ToolError::reject("invalid_input", message)) },
                    );
                }
            };
            let fut = handler(input);
            Box::pin(async move {
                let output = fut.await?;
                serde_json::to_value(output).map_err(ToolError::internal)
            })
        };
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema: schema_value(schemars::schema_for!(I)),
            output_schema: Some(schema_value(schemars::schema_for!(O))),
            read_only: false,
            idempotent: false,
            revision: None,
            handler: Arc::new(erased),
        }
    }

    /// A tool on plain JSON (the escape hatch): the caller gives the input schema and the
    /// handler takes and returns `serde_json::Value`. Set an output schema with
    /// [`output_schema`](Self::output_schema) if there is one.
    pub fn define_json<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Tool
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema,
            output_schema: None,
            read_only: false,
            idempotent: false,
            revision: None,
            handler: Arc::new(move |args| Box::pin(handler(args))),
        }
    }

    /// Replace the input schema (for example to add constraints `schemars` cannot express).
    /// It must be a JSON Schema object of `"type": "object"`.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Replace (or set) the output schema. MCP clients check structured results against it.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Declare that the tool does not change anything (an MCP annotation hint; CLIs may
    /// use it, the host's policy does not).
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Declare that calling the tool twice with the same input has the effect of once.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// A stable identity of this tool's contract (e.g. `lookup_issue/v1`). Required for tools
    /// used on a thread: the revisions join the thread fingerprint, so a changed contract
    /// starts a new provider session instead of resuming one that saw the old tool.
    pub fn revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = Some(revision.into());
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The input schema.
    pub fn input_schema_json(&self) -> &Value {
        &self.input_schema
    }

    /// The output schema, if any.
    pub fn output_schema_json(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    /// The revision, if set.
    pub fn revision_id(&self) -> Option<&str> {
        self.revision.as_deref()
    }

    /// Whether the tool is declared read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the tool is declared idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// Call the handler as the MCP server does: panics and internal errors become a
    /// sanitised [`ToolOutcome::Failed`], never a crash.
    pub(crate) async fn invoke(&self, args: Value) -> ToolOutcome {
        let fut = (self.handler)(args);
        match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(Ok(value)) => ToolOutcome::Ok(value),
            Ok(Err(ToolError(Kind::Reject { code, message }))) => {
                ToolOutcome::Rejected { code, message }
            }
            Ok(Err(ToolError(Kind::Internal(error)))) => {
                let reference = incident_reference();
                tracing::warn!(tool = %self.name, reference = %reference, error = %error, "host tool failed");
                ToolOutcome::Failed { reference }
            }
            Err(panic) => {
                let reference = incident_reference();
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                tracing::error!(tool = %self.name, reference = %reference, panic = %detail, "host tool panicked");
                ToolOutcome::Failed { reference }
            }
        }
    }
}

fn schema_value(schema: schemars::Schema) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Bool(true))
}

/// A short random id that ties what the model sees to the host's log line.
fn incident_reference() -> String {
    use rand::RngExt;
    format!("{:08x}", rand::rng().random::<u32>())
}

/// What one call of a tool came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolOutcome {
    /// The handler's output.
    Ok(Value),
    /// The handler's expected rejection (reaches the model as written).
    Rejected { code: String, message: String },
    /// An internal error or a panic: the model sees only that the tool failed and a
    /// reference to the host's log line.
    Failed { reference: String },
}

impl ToolOutcome {
    /// The text the model sees for an error outcome.
    pub(crate) fn error_text(&self) -> Option<String> {
        match self {
            ToolOutcome::Ok(_) => None,
            ToolOutcome::Rejected { code, message } => Some(format!("{code}: {message}")),
            ToolOutcome::Failed { reference } => Some(format!(
                "internal_error: the tool failed in the host (reference {reference})"
            )),
        }
    }
}

/// Why a tool handler did not produce output.
///
/// [`ToolError::reject`] is an expected refusal the model should see (its code and message
/// reach the model as a tool error). Any other error — `?` on any `std::error::Error` — is
/// internal: the model sees only that the tool failed, with a reference to the host's log
/// line; its text never leaves the host.
pub struct ToolError(Kind);

enum Kind {
    Reject { code: String, message: String },
    Internal(Box<dyn std::error::Error + Send + Sync>),
}

impl ToolError {
    /// An expected rejection the model sees: a short machine code and a message.
    pub fn reject(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError(Kind::Reject {
            code: code.into(),
            message: message.into(),
        })
    }

    /// An internal failure (logged by the host, never shown to the model).
    pub fn internal(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ToolError {
        ToolError(Kind::Internal(error.into()))
    }

    /// The rejection's code, if this is a rejection.
    pub fn code(&self) -> Option<&str> {
        match &self.0 {
            Kind::Reject { code, .. } => Some(code),
            Kind::Internal(_) => None,
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> Self {
        ToolError::internal(error)
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Reject { code, message } => f
                .debug_struct("Reject")
                .field("code", code)
                .field("message", message)
                .finish(),
            Kind::Internal(e) => f.debug_tuple("Internal").field(e).finish(),
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Reject { code, message } => write!(f, "{code}: {message}"),
            Kind::Internal(e) => write!(f, "internal: {e}"),
        }
    }
}

/// A tool set that cannot be served. Nothing was started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolsError {
    /// A tool name is empty, too long or has characters other than ASCII letters, digits,
    /// `_` and `-`.
    #[error(
        "tool name {name:?} is invalid: use 1 to {MAX_TOOL_NAME} ASCII letters, digits, `_` or `-`"
    )]
    InvalidName {
        /// The name.
        name: String,
    },
    /// Two tools have the same name.
    #[error("two tools are named `{name}`")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A schema is not a JSON Schema object of type `object` (input) or not an object
    /// (output).
    #[error("tool `{tool}`: the {which} schema is invalid: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A tool without a revision was used on a thread.
    #[error(
        "tool `{tool}` has no revision: tools used on a thread need `Tool::revision` (it joins the thread fingerprint)"
    )]
    RevisionRequired {
        /// The tool.
        tool: String,
    },
    /// The driver cannot hand an HTTP MCP server to its CLI, so host tools cannot reach it.
    #[error(
        "driver `{driver}` cannot deliver host tools: its CLI takes no HTTP MCP server (descriptor `mcp.http` is false)"
    )]
    Unsupported {
        /// The driver.
        driver: String,
    },
    /// The loopback MCP server could not start.
    #[error("the host tool server could not start: {reason}")]
    Server {
        /// The OS error.
        reason: String,
    },
}

/// Check a tool set before it is served.
pub(crate) fn check(tools: &[Tool]) -> Result<(), ToolsError> {
    let mut seen = std::collections::BTreeSet::new();
    for tool in tools {
        let name = &tool.name;
        let valid = !name.is_empty()
            && name.len() <= MAX_TOOL_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ToolsError::InvalidName { name: name.clone() });
        }
        if !seen.insert(name.as_str()) {
            return Err(ToolsError::Duplicate { name: name.clone() });
        }
        let invalid = |which, reason: &str| ToolsError::InvalidSchema {
            tool: name.clone(),
            which,
            reason: reason.to_owned(),
        };
        match tool.input_schema.as_object() {
            None => return Err(invalid("input", "it is not a JSON object")),
            Some(o) if o.get("type").and_then(Value::as_str) != Some("object") => {
                return Err(invalid(
                    "input",
                    "its `type` must be \"object\" (MCP tools take named arguments)",
                ));
            }
            Some(_) => {}
        }
        if let Some(out) = &tool.output_schema
            && !out.is_object()
        {
            return Err(invalid("output", "it is not a JSON object"));
        }
        jsonschema::validator_for(&tool.input_schema)
            .map_err(|e| invalid("input", &e.to_string()))?;
    }
    Ok(())
}

/// The tool set as thread-fingerprint entries (`name@revision`, flags), refusing tools
/// without a revision.
pub(crate) fn fingerprint_entries(tools: &[Tool]) -> Result<Vec<String>, ToolsError> {
    tools
        .iter()
        .map(|t| {
            let revision = t
                .revision
                .as_deref()
                .ok_or_else(|| ToolsError::RevisionRequired {
                    tool: t.name.clone(),
                })?;
            Ok(format!(
                "{}@{}{}{}",
                t.name,
                revision,
                if t.read_only { " ro" } else { "" },
                if t.idempotent { " idem" } else { "" }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, schemars::JsonSchema)]
    struct Input {
        n: u32,
    }

    #[derive(Serialize, schemars::JsonSchema)]
    struct Output {
        doubled: u32,
    }

    fn doubler() -> Tool {
        Tool::define("double", "Double n", |i: Input| async move {
            match i.n {
                0 => Err(ToolError::reject("zero", "zero is not allowed")),
                1 => Err(ToolError::from(std::io::Error::other(
                    "disk on fire at /secret/path",
                ))),
                2 => panic!("handler bug with /secret/detail"),
                n => Ok(Output { doubled: n * 2 }),
            }
        })
    }

    #[tokio::test]
    async fn outcomes_are_sanitised() {
        let tool = doubler();
        assert_eq!(
            tool.invoke(serde_json::json!({"n": 4})).await,
            ToolOutcome::Ok(serde_json::json!({"doubled": 8}))
        );
        let rejected = tool.invoke(serde_json::json!({"n": 0})).await;
        assert_eq!(rejected.error_text().unwrap(), "zero: zero is not allowed");
        for n in [1, 2] {
            let failed = tool.invoke(serde_json::json!({ "n": n })).await;
            let text = failed.error_text().unwrap();
            assert!(matches!(failed, ToolOutcome::Failed { .. }), "{failed:?}");
            assert!(!text.contains("secret"), "{text}");
        }
        let bad = tool.invoke(serde_json::json!({"n": "x"})).await;
        assert!(
            bad.error_text().unwrap().starts_with("invalid_input: "),
            "{bad:?}"
        );
    }

    #[test]
    fn schemas_come_from_the_types() {
        let tool = doubler();
        assert_eq!(tool.input_schema_json()["type"], "object");
        assert_eq!(tool.input_schema_json()["required"][0], "n");
        assert_eq!(
            tool.output_schema_json().unwrap()["properties"]["doubled"]["type"],
            "integer"
        );
        check(&[tool]).unwrap();
    }

    #[test]
    fn bad_sets_are_refused() {
        let named = |n: &str| doubler_named(n);
        assert!(matches!(
            check(&[named("a b")]),
            Err(ToolsError::InvalidName { .. })
        ));
        assert!(matches!(
            check(&[named(&"x".repeat(MAX_TOOL_NAME + 1))]),
            Err(ToolsError::InvalidName { .. })
        ));
        assert!(matches!(
            check(&[named("a"), named("a")]),
            Err(ToolsError::Duplicate { .. })
        ));
        let not_object = named("s").input_schema(serde_json::json!({"type": "string"}));
        assert!(matches!(
            check(&[not_object]),
            Err(ToolsError::InvalidSchema { which: "input", .. })
        ));
        assert!(matches!(
            fingerprint_entries(&[named("a")]),
            Err(ToolsError::RevisionRequired { .. })
        ));
        assert_eq!(
            fingerprint_entries(&[named("a").revision("a/v1").read_only()]).unwrap(),
            vec!["a@a/v1 ro".to_owned()]
        );
    }

    fn doubler_named(name: &str) -> Tool {
        Tool::define_json(
            name,
            "d",
            serde_json::json!({"type": "object"}),
            |v| async move { Ok(v) },
        )
    }
}
