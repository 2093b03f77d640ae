//! Structured output: JSON Schemas from Rust types (schemars) or raw JSON, the choice of
//! mechanism against the driver's descriptor, the prompt instructions of the prompt+validate
//! mechanism, and local validation (jsonschema).
//!
//! Negotiation: the driver's native mechanism if its descriptor declares it for this
//! transport (streaming) and policy (approvals that ask), otherwise prompt + local
//! validation, otherwise [`Error::StructuredOutputUnsupported`] before launch. Schemas are
//! compiled and their local `$ref`s inlined before launch; a recursive schema cannot be
//! inlined and is refused with [`Error::InvalidSchema`]. Must not: talk to processes.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::result::RunResult;

/// A JSON Schema the final answer must satisfy, with its options.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    json: Value,
    name: Option<String>,
    description: Option<String>,
    return_invalid: bool,
}

/// How the structured output was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// The CLI's own schema support.
    Native,
    /// Instructions in the prompt, validated locally.
    PromptValidate,
}

/// The structured result of a run with a schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StructuredOutput {
    /// Mechanism used.
    pub mechanism: Mechanism,
    /// The JSON value found (none when nothing parsed as JSON).
    pub value: Option<Value>,
    /// The value satisfies the schema.
    pub valid: bool,
    /// Validation errors (empty when valid).
    pub errors: Vec<String>,
}

impl Schema {
    /// The schema of a Rust type (local references inlined).
    pub fn of<T: schemars::JsonSchema>() -> Result<Schema, Error> {
        let generated = schemars::schema_for!(T);
        let json = serde_json::to_value(&generated).map_err(|e| Error::InvalidSchema {
            reason: format!("cannot serialise the generated schema: {e}"),
        })?;
        Self::from_json(json)
    }

    /// A raw JSON Schema (draft 2020-12 or 7). Local `#/$defs/…` and `#/definitions/…`
    /// references are inlined; the schema must compile.
    pub fn from_json(json: Value) -> Result<Schema, Error> {
        if !json.is_object() {
            return Err(Error::InvalidSchema {
                reason: "a schema must be a JSON object".into(),
            });
        }
        let inlined = inline_refs(&json)?;
        jsonschema::validator_for(&inlined).map_err(|e| Error::InvalidSchema {
            reason: e.to_string(),
        })?;
        Ok(Schema {
            json: inlined,
            name: None,
            description: None,
            return_invalid: false,
        })
    }

    /// A name for the schema (passed to CLIs that take one).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A description for the schema.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Return output that fails validation (with its errors) instead of failing the run.
    pub fn return_invalid(mut self, on: bool) -> Self {
        self.return_invalid = on;
        self
    }

    /// Whether objects may carry properties the schema does not list. `false` adds
    /// `"additionalProperties": false` to every object schema that does not say otherwise.
    pub fn allow_additional_properties(mut self, allow: bool) -> Self {
        if !allow {
            close_objects(&mut self.json);
        }
        self
    }

    /// The (inlined) schema.
    pub fn json(&self) -> &Value {
        &self.json
    }

    pub(crate) fn wit_name(&self) -> Option<String> {
        self.name.clone()
    }

    pub(crate) fn wit_description(&self) -> Option<String> {
        self.description.clone()
    }

    pub(crate) fn returns_invalid(&self) -> bool {
        self.return_invalid
    }
}

fn close_objects(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("type") == Some(&Value::String("object".into()))
                && !map.contains_key("additionalProperties")
            {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for child in map.values_mut() {
                close_objects(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// Inline local references; refuse recursive and non-local ones.
fn inline_refs(root: &Value) -> Result<Value, Error> {
    fn walk(v: &Value, root: &Value, stack: &mut Vec<String>) -> Result<Value, Error> {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    let pointer = r.strip_prefix('#').ok_or_else(|| Error::InvalidSchema {
                        reason: format!("only local references can be inlined, not `{r}`"),
                    })?;
                    if stack.contains(r) {
                        return Err(Error::InvalidSchema {
                            reason: format!(
                                "the schema is recursive through `{r}` and cannot be inlined"
                            ),
                        });
                    }
                    let target = root.pointer(pointer).ok_or_else(|| Error::InvalidSchema {
                        reason: format!("reference `{r}` points nowhere"),
                    })?;
                    stack.push(r.clone());
                    let mut resolved = walk(target, root, stack)?;
                    stack.pop();
                    // Keep sibling keywords (e.g. a description next to the reference).
                    if let Value::Object(out) = &mut resolved {
                        for (k, val) in map {
                            if k != "$ref" {
                                out.insert(k.clone(), walk(val, root, stack)?);
                            }
                        }
                    }
                    return Ok(resolved);
                }
                let mut out = Map::new();
                for (k, val) in map {
                    if k == "$defs" || k == "definitions" {
                        continue;
                    }
                    out.insert(k.clone(), walk(val, root, stack)?);
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items
                .iter()
                .map(|i| walk(i, root, stack))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }
    walk(root, root, &mut Vec::new())
}

/// Choose the mechanism for a run.
pub(crate) fn negotiate(
    descriptor: &Descriptor,
    streaming: bool,
    asks: bool,
) -> Result<Mechanism, Error> {
    let so = &descriptor.structured_output;
    let unsupported = |reason: &str| Error::StructuredOutputUnsupported {
        driver: descriptor.name.clone(),
        reason: reason.to_owned(),
    };
    if !so.native && !so.prompt_validate {
        return Err(unsupported(
            "the driver declares no structured-output mechanism",
        ));
    }
    if streaming && !so.with_streaming {
        return Err(unsupported(
            "structured output does not work with the streaming transport for this driver; pass .streaming(false)",
        ));
    }
    if so.native && (!asks || so.native_with_approvals) {
        return Ok(Mechanism::Native);
    }
    if so.prompt_validate {
        return Ok(Mechanism::PromptValidate);
    }
    Err(unsupported(
        "native structured output does not work with approvals that ask, and prompt+validate is not declared",
    ))
}

/// Marker line of the prompt+validate instructions.
pub const PROMPT_SCHEMA_MARKER: &str =
    "Respond with only a JSON value that conforms to this JSON Schema:";

/// The prompt with schema instructions appended (prompt+validate).
pub(crate) fn with_instructions(prompt: &str, schema: &Schema) -> String {
    format!("{prompt}\n\n{PROMPT_SCHEMA_MARKER}\n{}", schema.json)
}

/// Find the JSON value in a final text: the whole text, a fenced block, or the outermost
/// object/array.
fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str(t) {
        return Some(v);
    }
    if let Some(start) = t.find("```") {
        let body = &t[start + 3..];
        let body = body.strip_prefix("json").unwrap_or(body);
        if let Some(end) = body.find("```")
            && let Ok(v) = serde_json::from_str(body[..end].trim())
        {
            return Some(v);
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (t.find(open), t.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&t[a..=b])
        {
            return Some(v);
        }
    }
    None
}

/// Validate what a run produced against the schema.
pub(crate) fn evaluate(
    schema: &Schema,
    mechanism: Mechanism,
    result: &RunResult,
) -> StructuredOutput {
    // Native means the CLI produced the value: never guessed from the text (that would report
    // `native` for prompt-and-validate).
    let value = match mechanism {
        Mechanism::Native => result.structured_output.clone(),
        Mechanism::PromptValidate => extract_json(&result.text),
    };
    let errors: Vec<String> = match &value {
        None if mechanism == Mechanism::Native => {
            vec!["the driver reported no structured output (native mechanism)".to_owned()]
        }
        None => vec!["the output contains no JSON value".to_owned()],
        Some(v) => match jsonschema::validator_for(&schema.json) {
            Ok(validator) => validator
                .iter_errors(v)
                .map(|e| format!("{}: {e}", e.instance_path()))
                .collect(),
            Err(e) => vec![format!("schema does not compile: {e}")],
        },
    };
    StructuredOutput {
        mechanism,
        valid: errors.is_empty(),
        value,
        errors,
    }
}

/// Attach the structured output to a run's result; output that fails validation fails the
/// run (reason `invalid_output`) unless the schema returns invalid output.
pub(crate) fn apply(
    schema: &Schema,
    mechanism: Mechanism,
    result: Result<RunResult, Error>,
) -> Result<RunResult, Error> {
    match result {
        Ok(mut r) => {
            let structured = evaluate(schema, mechanism, &r);
            let invalid = !structured.valid && !schema.returns_invalid();
            let errors = structured.errors.join("; ");
            r.structured = Some(structured);
            if invalid {
                // A run that failed its schema is not a healthy resume point.
                if let Some(cp) = r.checkpoint.as_mut() {
                    cp.invalidate();
                }
                return Err(Error::Run(Box::new(crate::error::RunError {
                    reason: crate::error::FailureReason::InvalidOutput,
                    message: format!("the output does not satisfy the schema: {errors}"),
                    details: None,
                    result: r,
                })));
            }
            Ok(r)
        }
        Err(Error::Run(mut e)) => {
            let structured = evaluate(schema, mechanism, &e.result);
            e.result.structured = Some(structured);
            Err(Error::Run(e))
        }
        Err(other) => Err(other),
    }
}

impl RunResult {
    /// Decode the validated structured output (or, without a schema, the final text as JSON)
    /// into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let value = match &self.structured {
            Some(s) if s.valid => s.value.clone().unwrap_or(Value::Null),
            Some(s) => {
                return Err(Error::Decode {
                    message: format!(
                        "the structured output is not valid: {}",
                        s.errors.join("; ")
                    ),
                });
            }
            None => extract_json(&self.text).ok_or_else(|| Error::Decode {
                message: "the final text is not JSON".into(),
            })?,
        };
        serde_json::from_value(value).map_err(|e| Error::Decode {
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn negotiation_is_native_else_prompt_validate_else_refused() {
        let with = |native, prompt_validate, with_streaming, native_with_approvals| {
            let mut d = crate::wasm::convert::minimal_host_descriptor();
            d.structured_output = crate::descriptor::StructuredOutputCaps {
                native,
                prompt_validate,
                with_streaming,
                native_with_approvals,
            };
            d
        };
        let refused = |r: Result<Mechanism, Error>, why: &str| {
            assert!(
                matches!(&r, Err(Error::StructuredOutputUnsupported { reason, .. }) if reason.contains(why)),
                "{r:?}"
            )
        };
        // No mechanism at all.
        refused(
            negotiate(&with(false, false, true, true), false, false),
            "no structured-output",
        );
        // Streaming needs `with_streaming`.
        refused(
            negotiate(&with(true, true, false, true), true, false),
            "streaming",
        );
        assert_eq!(
            negotiate(&with(true, true, false, true), false, false).unwrap(),
            Mechanism::Native
        );
        // Native first; with approvals that ask only if native works with them.
        assert_eq!(
            negotiate(&with(true, true, true, false), true, false).unwrap(),
            Mechanism::Native
        );
        assert_eq!(
            negotiate(&with(true, true, true, true), true, true).unwrap(),
            Mechanism::Native
        );
        assert_eq!(
            negotiate(&with(true, true, true, false), true, true).unwrap(),
            Mechanism::PromptValidate
        );
        refused(
            negotiate(&with(true, false, true, false), true, true),
            "approvals that ask",
        );
        // Prompt+validate alone.
        assert_eq!(
            negotiate(&with(false, true, true, false), true, true).unwrap(),
            Mechanism::PromptValidate
        );
    }

    #[test]
    fn local_refs_are_inlined_and_recursion_refused() {
        let s = Schema::from_json(json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}}
        }))
        .unwrap();
        assert_eq!(s.json()["properties"]["a"], json!({"type": "string"}));
        assert!(s.json().get("$defs").is_none());
        let r = Schema::from_json(json!({
            "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
            "$ref": "#/$defs/N"
        }));
        assert!(matches!(r, Err(Error::InvalidSchema { reason }) if reason.contains("recursive")));
        assert!(matches!(
            Schema::from_json(json!({"type": 12})),
            Err(Error::InvalidSchema { .. })
        ));
        assert!(matches!(
            Schema::from_json(json!([1])),
            Err(Error::InvalidSchema { .. })
        ));
    }

    #[test]
    fn json_is_found_in_text() {
        assert_eq!(extract_json(" {\"a\":1} "), Some(json!({"a":1})));
        assert_eq!(
            extract_json("Here:\n```json\n{\"a\":2}\n```"),
            Some(json!({"a":2}))
        );
        assert_eq!(extract_json("x {\"a\":3} y"), Some(json!({"a":3})));
        assert_eq!(extract_json("no json"), None);
    }

    #[test]
    fn closing_objects_adds_additional_properties_false() {
        let s = Schema::from_json(json!({"type":"object","properties":{"o":{"type":"object"}}}))
            .unwrap()
            .allow_additional_properties(false);
        assert_eq!(s.json()["additionalProperties"], json!(false));
        assert_eq!(
            s.json()["properties"]["o"]["additionalProperties"],
            json!(false)
        );
    }
}
