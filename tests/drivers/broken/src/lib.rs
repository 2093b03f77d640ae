//! A test-only driver that breaks exactly one conformance clause, chosen by the config field
//! `defect` (otherwise it is the reference driver):
//!
//! - `unclosed-tool` — starts a tool call that never ends (EVT-11);
//! - `valid-checkpoint-on-failure` — claims a valid checkpoint on failed runs (RSP-01);
//! - `raw-text` — returns the raw protocol stdout as the final text (RSP-03);
//! - `chunk-notice` — emits a notice per stdout chunk, so events depend on chunking (FLT-01);
//! - `invented-usage` — reports zero usage when the provider reported none (USG-01);
//! - `accept-unknown-fields` — accepts any config field (CFG-03);
//! - `ignore-resume` — starts a new session whatever the checkpoint says (SES-04);
//! - `trap-on-output` — panics on the first stdout chunk (RUN-00).
//!
//! A driver cannot emit two run starts: `RunStarted`/`RunFinished` are host-owned.

use adaptor_sdk::json::{self, check_fields, str_field};
use adaptor_sdk::{
    Actions, ConfigError, Descriptor, Driver, ExitStatus, Launch, Outcome, RunRequest, Session,
    StartError, top_scope,
};
use reference_driver::{ReferenceDriver, ReferenceSession};
use serde_json::Value;

const DEFECTS: &[&str] = &[
    "unclosed-tool",
    "valid-checkpoint-on-failure",
    "raw-text",
    "chunk-notice",
    "invented-usage",
    "accept-unknown-fields",
    "ignore-resume",
    "trap-on-output",
];

/// The broken driver.
pub struct BrokenDriver;

fn without_defect(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("defect");
    }
    c
}

impl Driver for BrokenDriver {
    type Session = BrokenSession;

    fn describe() -> Descriptor {
        let mut d = ReferenceDriver::describe();
        d.name = "broken".into();
        d.display_name = "Broken (one defect)".into();
        let mut schema: Value = serde_json::from_str(&d.config_schema).unwrap_or(Value::Null);
        schema["properties"]["defect"] = serde_json::json!({"type": "string", "enum": DEFECTS});
        d.config_schema = schema.to_string();
        d
    }

    fn validate_config(config: &Value) -> Result<(), ConfigError> {
        if let Some(defect) = config.get("defect") {
            check_fields(
                &serde_json::json!({"defect": defect}),
                &[("defect", "string")],
            )?;
            if !DEFECTS.contains(&str_field(config, "defect").unwrap_or_default()) {
                return Err(ConfigError {
                    path: "/defect".into(),
                    message: format!("unknown defect (known: {})", DEFECTS.join(", ")),
                });
            }
            if str_field(config, "defect") == Some("accept-unknown-fields") {
                return Ok(());
            }
        }
        ReferenceDriver::validate_config(&without_defect(config))
    }
}

/// A reference session with one defect.
pub struct BrokenSession {
    inner: ReferenceSession,
    defect: String,
    stdout: Vec<u8>,
    started_tool: bool,
}

impl Session for BrokenSession {
    fn new(mut request: RunRequest) -> Self {
        let config = json::parse_config(&request.config_json).unwrap_or(Value::Null);
        let defect = str_field(&config, "defect").unwrap_or_default().to_owned();
        request.config_json = without_defect(&config).to_string();
        if defect == "ignore-resume" {
            request.resume = None;
        }
        Self {
            inner: ReferenceSession::new(request),
            defect,
            stdout: Vec::new(),
            started_tool: false,
        }
    }

    fn start(&mut self) -> Result<Launch, StartError> {
        self.inner.start()
    }

    fn on_stdout(&mut self, chunk: &[u8], out: &mut Actions) {
        if self.defect == "raw-text" && self.stdout.len() < (1 << 20) {
            self.stdout.extend_from_slice(chunk);
        }
        match self.defect.as_str() {
            "trap-on-output" => panic!("broken: trap on output"),
            "unclosed-tool" if !self.started_tool => {
                self.started_tool = true;
                out.tool_start("never-ends", "dangling", None, &top_scope());
            }
            "chunk-notice" => out.notice("chunk", &format!("{} bytes", chunk.len()), None),
            _ => {}
        }
        self.inner.on_stdout(chunk, out);
    }

    fn on_stderr(&mut self, chunk: &[u8], out: &mut Actions) {
        self.inner.on_stderr(chunk, out);
    }

    fn on_exit(&mut self, status: &ExitStatus, out: &mut Actions) {
        self.inner.on_exit(status, out);
    }

    fn finish(&mut self) -> Outcome {
        let mut outcome = self.inner.finish();
        match self.defect.as_str() {
            "valid-checkpoint-on-failure" => {
                if let Some(cp) = outcome.checkpoint.as_mut() {
                    cp.valid = true;
                }
            }
            "raw-text" => outcome.text = String::from_utf8_lossy(&self.stdout).into_owned(),
            "invented-usage" if outcome.usage.is_none() => {
                outcome.usage = Some(adaptor_sdk::Usage {
                    input_tokens: Some(0),
                    output_tokens: Some(0),
                    cache_read_tokens: None,
                    cache_write_tokens: None,
                    reasoning_tokens: None,
                    cost_usd: None,
                });
            }
            _ => {}
        }
        outcome
    }
}

#[cfg(target_family = "wasm")]
adaptor_sdk::export_driver!(BrokenDriver);
