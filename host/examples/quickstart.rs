//! Run one prompt through the built-in reference driver and print the result.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example quickstart`
//! (the reference provider must be on PATH, as a real CLI would be).

use adaptor::{Agent, Driver, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let driver = Driver::builtin("reference")?;
    let agent = Agent::builder(driver).build();
    let result = agent.run("Say hello").await?;
    println!("{}", result.text);
    if let Some(u) = &result.usage {
        eprintln!(
            "{:?} in / {:?} out tokens, session {:?}",
            u.input_tokens,
            u.output_tokens,
            result.session_id()
        );
    }
    Ok(())
}
