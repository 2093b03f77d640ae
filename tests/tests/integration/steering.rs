//! Steering: input the caller adds to a running turn (`RunOptions::steering`,
//! `Stream::steer`), end to end through the host, the reference driver and the real
//! reference provider — and every way it is refused, with nothing written.

use adaptor::{Error, Event, ItemKind, RunOptions, SteerError};
use adaptor_integration_tests::*;
use futures::StreamExt;

/// Wait for the run's session event (the provider is running its turn).
async fn until_session(stream: &mut adaptor::Stream) {
    while let Some(event) = stream.next().await {
        if matches!(event, Event::Session(_)) {
            return;
        }
    }
    panic!("the run ended before its session started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_added_to_a_running_turn_is_answered_in_it() {
    let ws = tmp();
    let state = tmp();
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    // `[[await-input]]`: the provider waits, after its session line, for input.
    let mut stream = agent.stream_with("[[await-input]] hello", RunOptions::new().steering(true));
    until_session(&mut stream).await;
    // From another task, through a handle.
    let steerer = stream.steerer();
    tokio::spawn(async move { steerer.steer("and the tests too").await })
        .await
        .unwrap()
        .expect("input delivered");
    let result = stream.result().await.expect("run");
    assert_eq!(result.text, "Reference reply: hello + and the tests too");
    let users: Vec<&str> = result
        .transcript()
        .iter()
        .filter(|i| i.kind == ItemKind::User)
        .filter_map(|i| i.text.as_deref())
        .collect();
    assert_eq!(users, ["and the tests too"]);
    let stdin = String::from_utf8_lossy(&result.raw().stdin).into_owned();
    assert!(
        stdin.contains(r#"{"text":"and the tests too","type":"input"}"#),
        "{stdin}"
    );
    // The turn is over: the same handle is refused.
    let late = stream_steer_after(&agent).await;
    assert!(matches!(late, Err(SteerError::TurnOver(_))), "{late:?}");
}

/// A steerable run that has finished: its steering handle is refused.
async fn stream_steer_after(agent: &adaptor::Agent) -> Result<(), SteerError> {
    let stream = agent.stream_with("done soon", RunOptions::new().steering(true));
    let steerer = stream.steerer();
    stream.result().await.expect("run");
    steerer.steer("too late").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_is_refused_where_it_cannot_work() {
    let ws = tmp();
    let state = tmp();
    let agent = agent_builder(reference(state.path()), ws.path()).build();
    // A run that did not ask for it.
    let mut stream = agent.stream("[[sleep 300]] hello");
    until_session(&mut stream).await;
    assert_eq!(stream.steer("more").await, Err(SteerError::NotSteerable));
    stream.result().await.expect("run");
    // Empty and oversized input never reaches the driver.
    let mut stream = agent.stream_with("[[await-input]] hello", RunOptions::new().steering(true));
    until_session(&mut stream).await;
    assert!(matches!(
        stream.steer("  ").await,
        Err(SteerError::Invalid(_))
    ));
    let big = "x".repeat(adaptor::MAX_STEER_BYTES + 1);
    assert!(matches!(
        stream.steer(big).await,
        Err(SteerError::Invalid(_))
    ));
    stream.steer("finally").await.expect("delivered");
    let result = stream.result().await.expect("run");
    assert_eq!(result.text, "Reference reply: hello + finally");
    // A driver that does not declare steering: refused before anything starts.
    let testbed = agent_builder(testbed(state.path()), ws.path()).build();
    let (events, result) =
        collect(testbed.stream_with("hello", RunOptions::new().steering(true))).await;
    match result {
        Err(Error::SteeringUnsupported { driver }) => assert_eq!(driver, "testbed"),
        other => panic!("expected SteeringUnsupported, got {other:?}"),
    }
    assert!(events.is_empty(), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_thread_turn_takes_input_too() {
    let ws = tmp();
    let state = tmp();
    let driver = adaptor::Driver::from_file(driver_path("reference"))
        .unwrap()
        .with_config(serde_json::json!({
            "command": provider_path().display().to_string(),
            "state_dir": state.path().display().to_string(),
            "transport": "stdio",
        }))
        .unwrap();
    let agent = agent_builder(driver, ws.path())
        .thread_store(adaptor::store::MemoryStore::new())
        .build();
    let thread = agent.thread("steered");
    let first = thread.run("first").await.expect("first");
    assert!(first.exit.kept_alive);
    let mut stream = thread.stream_with("[[await-input]] second", RunOptions::new().steering(true));
    until_session(&mut stream).await;
    stream.steer("with a twist").await.expect("delivered");
    let second = stream.result().await.expect("second");
    assert!(
        second.text.ends_with("second + with a twist"),
        "{}",
        second.text
    );
    assert!(
        second.exit.kept_alive,
        "the process stays for the next turn"
    );
    // The next turn on the same process is the next prompt alone.
    let third = thread.run("third").await.expect("third");
    assert!(third.text.ends_with("): third"), "{}", third.text);
    agent.close().await;
}
