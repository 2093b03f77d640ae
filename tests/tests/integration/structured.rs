//! Structured output through the pipeline: `run_as::<T>`, prompt+validate negotiation,
//! invalid output with and without `return_invalid`, and schemas refused before launch.

use adaptor::{Error, FailureReason, Mechanism, RunOptions, Schema, run_as, run_as_with};
use adaptor_integration_tests::*;
use serde::Deserialize;

#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
struct Review {
    verdict: Verdict,
    issues: Vec<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Approve,
    Reject,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Node {
    #[allow(dead_code)]
    next: Option<Box<Node>>,
}

fn agent() -> (adaptor::Agent, tempfile::TempDir, tempfile::TempDir) {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    (agent, state, ws)
}

/// The testbed driver declares prompt+validate only.
fn prompt_only_agent() -> (adaptor::Agent, tempfile::TempDir, tempfile::TempDir) {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let agent = agent_builder(testbed(state.path()), ws.path()).build();
    (agent, state, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_decodes_validated_output_with_both_mechanisms() {
    for (mechanism, (agent, _s, _w)) in [
        (Mechanism::Native, agent()),
        (Mechanism::PromptValidate, prompt_only_agent()),
    ] {
        let (review, result) = run_as::<Review>(&agent, "review the diff")
            .await
            .expect("structured run");
        assert_eq!(
            review,
            Review {
                verdict: Verdict::Approve,
                issues: vec![]
            }
        );
        let s = result.structured.as_ref().expect("structured output");
        assert_eq!(s.mechanism, mechanism);
        assert!(s.valid && s.errors.is_empty());
        assert_eq!(result.decode::<Review>().unwrap(), review);
        let args = &result.raw().launch.as_ref().unwrap().args;
        let stdin = String::from_utf8_lossy(&result.raw().stdin).into_owned();
        match mechanism {
            Mechanism::Native => {
                // The schema went to the CLI natively, through a private file, not the prompt.
                assert!(args.iter().any(|a| a == "--json-schema"), "{args:?}");
                assert!(!stdin.contains(adaptor::PROMPT_SCHEMA_MARKER));
                assert_eq!(
                    result.structured_output,
                    Some(serde_json::json!({"issues": [], "verdict": "approve"}))
                );
                let schema_file = args
                    .iter()
                    .skip_while(|a| *a != "--json-schema")
                    .nth(1)
                    .unwrap();
                assert!(
                    !std::path::Path::new(schema_file).exists(),
                    "the private directory is removed after the run"
                );
            }
            Mechanism::PromptValidate => {
                assert!(!args.iter().any(|a| a == "--json-schema"));
                assert!(stdin.contains(adaptor::PROMPT_SCHEMA_MARKER));
            }
        }
    }
}

/// Native means the CLI produced the value: when the driver reports none, the host does not
/// dig JSON out of the final text (and still call it native); the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_output_is_never_guessed_from_the_text() {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hostile = configured(&test_driver_path("hostile"), state.path());
    let agent = agent_builder(hostile, ws.path()).build();
    let e = match run_as::<Review>(&agent, "[[drop-structured]] review the diff").await {
        Err(Error::Run(e)) => e,
        other => panic!("expected a failed run, got {other:?}"),
    };
    assert_eq!(e.reason, FailureReason::InvalidOutput);
    assert!(
        e.result.text.contains("approve"),
        "the text has JSON: {}",
        e.result.text
    );
    let s = e.result.structured.as_ref().unwrap();
    assert_eq!(s.mechanism, Mechanism::Native);
    assert_eq!(s.value, None);
    assert_eq!(
        s.errors,
        ["the driver reported no structured output (native mechanism)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_output_fails_unless_returned() {
    let (agent, _s, _w) = prompt_only_agent();
    let e = match run_as::<Review>(&agent, "[[invalid-json]] review").await {
        Err(Error::Run(e)) => e,
        other => panic!("expected invalid output, got {other:?}"),
    };
    assert_eq!(e.reason, FailureReason::InvalidOutput);
    let s = e.result.structured.as_ref().unwrap();
    assert!(!s.valid && !s.errors.is_empty(), "{s:?}");
    assert!(
        !e.result.checkpoint.as_ref().unwrap().is_valid(),
        "no valid checkpoint on a failed run"
    );

    let schema = Schema::of::<Review>().unwrap().return_invalid(true);
    let r = agent
        .run_with("[[invalid-json]] review", RunOptions::new().schema(schema))
        .await
        .expect("return_invalid keeps the run successful");
    let s = r.structured.as_ref().unwrap();
    assert!(!s.valid);
    assert_eq!(s.value, Some(serde_json::json!({"unexpected": true})));
    assert!(matches!(r.decode::<Review>(), Err(Error::Decode { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_schemas_are_refused_before_launch() {
    let (agent, _s, _w) = agent();
    assert!(matches!(
        run_as::<Node>(&agent, "recursive").await,
        Err(Error::InvalidSchema { reason }) if reason.contains("recursive")
    ));
    assert!(matches!(
        Schema::from_json(serde_json::json!({"type": 12})),
        Err(Error::InvalidSchema { .. })
    ));
    // Streaming is fine for the reference driver; a raw schema works too.
    let raw = Schema::from_json(serde_json::json!({
        "type": "object",
        "properties": {"ok": {"const": true}},
        "required": ["ok"]
    }))
    .unwrap()
    .name("ok");
    let (v, _) = run_as_with::<serde_json::Value>(&agent, "raw", RunOptions::new().schema(raw))
        .await
        .unwrap();
    assert_eq!(
        v,
        serde_json::json!({"ok": true}),
        "a schema given in the options is used as given"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_without_a_mechanism_refuses_schemas_before_launch() {
    let (state, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let driver = configured(&test_driver_path("unstable"), state.path());
    let agent = agent_builder(driver, ws.path()).build();
    let schema = Schema::of::<Review>().unwrap();
    let mut stream = agent.stream_with("x", RunOptions::new().schema(schema));
    use futures::StreamExt;
    assert!(stream.next().await.is_none(), "nothing may start");
    assert!(matches!(
        stream.result().await,
        Err(Error::StructuredOutputUnsupported { driver, .. }) if driver == "unstable"
    ));
}
