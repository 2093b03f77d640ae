//! Answer approval requests: a handler approves tool use and picks an answer for questions;
//! the event stream shows each request and how it was resolved.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example approvals`
//! (the reference provider asks when its prompt carries `[[ask-…]]` directives).

use adaptor::{
    Agent, ApprovalKind, ApprovalPolicy, ApprovalRequest, DecisionMode, Driver, Error, Event,
    Policy, QuestionMode,
};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let policy = Policy {
        approvals: ApprovalPolicy {
            permission: DecisionMode::Ask,
            question: QuestionMode::Ask,
            ..ApprovalPolicy::default()
        },
        ..Policy::default()
    };
    let agent = Agent::builder(Driver::builtin("reference")?)
        .policy(policy)
        .on_approval(|req: ApprovalRequest| async move {
            let answered = match req.kind {
                ApprovalKind::Question => req.answer(req.choices[0].key.clone()),
                _ if req.tool_name.as_deref() == Some("echo") => req.approve(),
                _ => req.deny("only echo is allowed"),
            };
            if let Err(e) = answered {
                eprintln!("could not answer: {e}");
            }
        })
        .build();
    let mut stream = agent.stream("[[ask-question]] [[ask-permission]] hello");
    while let Some(event) = stream.next().await {
        match event {
            Event::ApprovalRequest(req) => println!("asked: {} ({})", req.title, req.kind),
            Event::ApprovalResolved(r) => println!("resolved {}: {}", r.id, r.resolution),
            Event::ToolResult(t) => println!("tool result: {}", t.output),
            _ => {}
        }
    }
    let result = stream.result().await?;
    println!("{}", result.text);
    Ok(())
}
