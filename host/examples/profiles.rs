//! A dedicated profile and an instructions bundle: two agents on one machine, each with a
//! CLI profile of its own (the host makes the directory, links the user's login into one of
//! them and points the CLI at it), and a run whose `AGENTS.md` bundle reaches the CLI.
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example profiles`

use adaptor::{Agent, Driver, Error, InstructionsBundle, Profile, RunOptions};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!(
        "agent-adaptor-example-profiles-{}",
        std::process::id()
    ));
    let io = |e: std::io::Error| Error::InvalidWorkspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    // A stand-in for the user's home: the reference provider's own profile holds a login.
    let home = dir.join("home");
    let native = home.join(".local/state/reference-provider");
    std::fs::create_dir_all(&native).map_err(io)?;
    std::fs::write(native.join("auth.json"), r#"{"account":"me@example.com"}"#).map_err(io)?;
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(bundle.join("docs")).map_err(io)?;
    std::fs::write(bundle.join("AGENTS.md"), "Follow docs/style.md.\n").map_err(io)?;
    std::fs::write(bundle.join("docs/style.md"), "Be terse.\n").map_err(io)?;

    let agent = |profile: Profile| -> Result<Agent, Error> {
        Ok(Agent::builder(Driver::builtin("reference")?)
            .workspace(&dir)
            .env("HOME", home.display().to_string())
            .profile(profile)
            .build())
    };
    let tenant_a = agent(
        Profile::clone_native(dir.join("profiles/a"))
            .link_auth()
            .into(),
    )?;
    let tenant_b = agent(Profile::dedicated(dir.join("profiles/b")))?;

    println!("before: in sync = {}", tenant_a.profile_state()?.in_sync());
    let state = tenant_a.sync_profile()?;
    for file in &state.files {
        println!(
            "  {} {:?}: {} -> {}",
            file.part,
            file.observed,
            file.target.display(),
            file.source.display()
        );
    }

    let with_bundle = RunOptions::new().instructions_bundle(InstructionsBundle::dir(&bundle));
    let (a, b) = tokio::join!(
        tenant_a.run_with("hello from a", with_bundle.clone()),
        tenant_b.run("hello from b")
    );
    let (a, b) = (a?, b?);
    let seen = |r: &adaptor::RunResult, key: &str| {
        r.transcript()[0]
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    println!("a: {} (login {:?})", a.text, seen(&a, "account"));
    println!("b: {} (login {:?})", b.text, seen(&b, "account"));
    println!(
        "a's CLI was told: {}",
        seen(&a, "instructions").unwrap_or_default()
    );
    for (name, r) in [("a", &a), ("b", &b)] {
        let session = dir
            .join("profiles")
            .join(name)
            .join(format!("{}.json", r.session_id().unwrap_or_default()));
        println!(
            "{name}'s session file: {} ({})",
            session.display(),
            session.exists()
        );
        if !session.exists() {
            return Err(io(std::io::Error::other(
                "the session is not in the profile",
            )));
        }
    }
    if seen(&a, "account").as_deref() != Some("me@example.com") || seen(&b, "account").is_some() {
        return Err(io(std::io::Error::other(
            "the logins are not what was asked",
        )));
    }
    std::fs::remove_dir_all(&dir).map_err(io)?;
    Ok(())
}
