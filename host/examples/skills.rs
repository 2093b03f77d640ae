//! Skills: one inline, one from a directory and one resolved by the application's own
//! catalogue (a `SkillProvider`), checked and materialized by the host before launch, listed
//! by Inspect, and read by the provider (the reference provider lists the skills it loaded).
//!
//! `./x.sh build-drivers && PATH="$CARGO_TARGET_DIR/debug:$PATH" cargo run -p agent-adaptor --example skills`

use adaptor::{Agent, Availability, Driver, Error, RunOptions, Skill, SkillProvider};
use futures::future::BoxFuture;

/// The application's catalogue of approved skills.
#[derive(Debug)]
struct Catalogue;

impl SkillProvider for Catalogue {
    fn resolve<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Skill, String>> {
        Box::pin(async move {
            match key {
                "triage" => Ok(Skill::inline(
                    "triage",
                    "---\nname: triage\ndescription: Sort new issues by severity\n---\n\nLabel each issue P0-P3.\n",
                )),
                other => Err(format!("`{other}` is not in the catalogue")),
            }
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!(
        "agent-adaptor-example-skills-{}",
        std::process::id()
    ));
    let io = |e: std::io::Error| Error::InvalidWorkspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    let review = dir.join("review");
    std::fs::create_dir_all(&review).map_err(io)?;
    std::fs::write(
        review.join("SKILL.md"),
        "---\nname: review\ndescription: Review a diff for bugs\n---\n\nRead the diff, list bugs.\n",
    )
    .map_err(io)?;

    let driver = Driver::builtin("reference")?.with_config(serde_json::json!({
        "state_dir": dir.join("provider").display().to_string(),
    }))?;
    let agent = Agent::builder(driver)
        .workspace(&dir)
        .skill_cache(dir.join("skill-cache"))
        .skill_provider(Catalogue)
        .skills([Skill::inline(
            "greet",
            "---\nname: greet\ndescription: Greet the user by name\n---\n\nSay hello.\n",
        )])
        .build();

    // What a run with the agent's defaults would see.
    let inspection = agent.inspect().await?;
    if let Availability::Supported { value } = &inspection.skills {
        for skill in value {
            println!(
                "inspect: {} — {} ({})",
                skill.key,
                skill.description.as_deref().unwrap_or("-"),
                skill.fingerprint
            );
        }
    }

    // Per-call skills are appended to the agent's.
    let result = agent
        .run_with(
            "hello",
            RunOptions::new().skills([Skill::dir(&review), Skill::key("triage")]),
        )
        .await?;
    let seen = result.transcript()[0]
        .data
        .as_ref()
        .and_then(|d| d.get("skills"))
        .cloned()
        .unwrap_or_default();
    println!("the provider loaded: {seen}");
    let _ = std::fs::remove_dir_all(&dir);
    let expected = ["greet: ", "review: ", "triage: "];
    if !expected.iter().all(|e| seen.to_string().contains(e)) {
        eprintln!("the provider did not see every skill");
        std::process::exit(1);
    }
    Ok(())
}
