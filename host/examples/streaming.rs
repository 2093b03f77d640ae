//! Stream a run's events as they arrive, with per-call options and error handling.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example streaming`

use std::time::Duration;

use adaptor::{Agent, Driver, Error, Event, Phase, RunOptions};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let driver =
        Driver::builtin("reference")?.with_config(serde_json::json!({ "model": "reference-1" }))?;
    let agent = Agent::builder(driver)
        .timeout(Duration::from_secs(30))
        .build();

    let mut stream = agent.stream_with("Explain streaming", RunOptions::new().model("reference-2"));
    println!("run {}", stream.run_id());
    while let Some(event) = stream.next().await {
        match event {
            Event::TextDelta(d) if d.phase == Phase::Delta => print!("{}", d.text),
            Event::Thinking(d) if d.phase == Phase::Delta => eprint!("[thinking] {}", d.text),
            Event::ToolCall(c) if c.phase == Phase::Start => {
                eprintln!("\n→ {} {:?}", c.name, c.args)
            }
            Event::ToolResult(r) => eprintln!("← {}", r.output),
            Event::RunFinished(f) => eprintln!("\nfinished (failed: {})", f.failed),
            _ => {}
        }
    }
    match stream.result().await {
        Ok(result) => println!("\nmodel {:?}, summary {:?}", result.model, result.summary),
        Err(Error::Run(e)) => eprintln!(
            "run failed ({}): {} — partial text {:?}",
            e.reason, e.message, e.result.text
        ),
        Err(other) => return Err(other),
    }
    Ok(())
}
