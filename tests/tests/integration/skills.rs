//! Skills through the host (issue 19): resolved, checked and materialized before launch,
//! handed to the driver as one bundle, readable by the provider under its confinement,
//! listed by Inspect, part of the thread fingerprint; refusals start nothing.

use std::sync::Arc;

use adaptor::store::{MemoryStore, ThreadStore};
use adaptor::{
    Availability, Error, RunOptions, Skill, SkillError, SkillLimits, SkillProvider, ThreadError,
};
use adaptor_integration_tests::{agent_builder, collect, driver_path, reference, tmp};
use futures::future::BoxFuture;

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\nDo the {name} thing.\n")
}

/// The skills the provider listed in its session line (it read every `SKILL.md`).
fn seen_skills(r: &adaptor::RunResult) -> Vec<String> {
    let init = &r.transcript()[0];
    init.data
        .as_ref()
        .and_then(|d| d.get("skills"))
        .and_then(|s| s.as_array())
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[derive(Debug)]
struct Catalogue;

impl SkillProvider for Catalogue {
    fn resolve<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Skill, String>> {
        Box::pin(async move {
            match key {
                "triage" => Ok(Skill::inline("triage", skill_md("triage", "Sort issues"))),
                "renamed" => Ok(Skill::inline("other", skill_md("other", "x"))),
                _ => Err(format!("no skill {key:?} in the catalogue")),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_and_call_skills_reach_the_provider_as_one_bundle() {
    let (state, ws, cache, src) = (tmp(), tmp(), tmp(), tmp());
    let review = src.path().join("review");
    std::fs::create_dir_all(review.join("scripts")).unwrap();
    std::fs::write(review.join("SKILL.md"), skill_md("review", "Review a diff")).unwrap();
    std::fs::write(review.join("scripts/check.sh"), "#!/bin/sh\necho ok\n").unwrap();
    let agent = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .skill_provider(Catalogue)
        .skills([Skill::inline("greet", skill_md("greet", "Say hello"))])
        .build();
    let r = agent
        .run_with(
            "hello",
            RunOptions::new().skills([Skill::dir(&review), Skill::key("triage")]),
        )
        .await
        .expect("run with skills");
    assert_eq!(
        seen_skills(&r),
        [
            "greet: Say hello",
            "review: Review a diff",
            "triage: Sort issues"
        ]
    );
    let args = &r.raw().launch.as_ref().unwrap().args;
    let root = args
        .windows(2)
        .find(|w| w[0] == "--plugin-dir")
        .map(|w| std::path::PathBuf::from(&w[1]))
        .expect("--plugin-dir");
    assert!(root.starts_with(cache.path().join("sets")), "{root:?}");
    assert!(root.join(".claude-plugin/plugin.json").is_file());
    assert_eq!(
        std::fs::read_to_string(root.join("skills/review/scripts/check.sh")).unwrap(),
        "#!/bin/sh\necho ok\n"
    );

    // The same skills again: the same content-addressed set; another set of skills: another.
    let again = agent
        .run_with(
            "again",
            RunOptions::new().skills([Skill::dir(&review), Skill::key("triage")]),
        )
        .await
        .unwrap();
    assert_eq!(again.raw().launch.as_ref().unwrap().args, *args);
    let fewer = agent.run("fewer").await.unwrap();
    assert_eq!(seen_skills(&fewer), ["greet: Say hello"]);
    assert!(
        !fewer
            .raw()
            .launch
            .as_ref()
            .unwrap()
            .args
            .contains(&root.display().to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_cached_set_is_rewritten_before_use() {
    let (state, ws, cache) = (tmp(), tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .skills([Skill::inline("greet", skill_md("greet", "Say hello"))])
        .build();
    let first = agent.run("one").await.unwrap();
    let root = cache.path().join("sets");
    let set = std::fs::read_dir(&root)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(
        set.join("skills/greet/SKILL.md"),
        skill_md("greet", "Exfiltrate"),
    )
    .unwrap();
    let second = agent.run("two").await.unwrap();
    assert_eq!(seen_skills(&first), seen_skills(&second));
    assert_eq!(seen_skills(&second), ["greet: Say hello"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_stop_the_run_before_anything_starts() {
    let (state, ws, cache, src) = (tmp(), tmp(), tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .skill_provider(Catalogue)
        .skill_limits(SkillLimits {
            max_file_bytes: 64,
            ..SkillLimits::default()
        })
        .build();
    let no_md = src.path().join("empty");
    std::fs::create_dir(&no_md).unwrap();
    type Expect = fn(&SkillError) -> bool;
    let cases: Vec<(Vec<Skill>, Expect)> = vec![
        (
            vec![
                Skill::inline("same", skill_md("same", "one")),
                Skill::inline("same", skill_md("same", "two")),
            ],
            |e| matches!(e, SkillError::Conflict { key, .. } if key == "same"),
        ),
        (vec![Skill::inline("Bad Key", "x")], |e| {
            matches!(e, SkillError::BadKey { .. })
        }),
        (
            vec![Skill::dir(&no_md)],
            |e| matches!(e, SkillError::MissingSkillMd { key } if key == "empty"),
        ),
        (
            vec![Skill::dir(src.path().join("missing"))],
            |e| matches!(e, SkillError::Read { key, .. } if key == "missing"),
        ),
        (
            vec![Skill::inline("big", "x".repeat(65))],
            |e| matches!(e, SkillError::FileTooLarge { entry, limit: 64, .. } if entry == "SKILL.md"),
        ),
        (
            vec![Skill::key("nope")],
            |e| matches!(e, SkillError::Provider { key, message } if key == "nope" && message.contains("catalogue")),
        ),
        (
            vec![Skill::key("renamed")],
            |e| matches!(e, SkillError::Provider { key, .. } if key == "renamed"),
        ),
    ];
    for (skills, expected) in cases {
        let (events, r) = collect(agent.stream_with("x", RunOptions::new().skills(skills))).await;
        assert!(events.is_empty(), "nothing started: {events:?}");
        match r {
            Err(Error::Skill(e)) => assert!(expected(&e), "{e}"),
            other => panic!("expected a skill error, got {other:?}"),
        }
    }
    // Nothing was written for a refused set.
    let sets = cache.path().join("sets");
    let written = std::fs::read_dir(&sets).map(|d| d.count()).unwrap_or(0);
    assert_eq!(written, 0);

    // A key without a provider.
    let bare = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .build();
    let r = bare
        .run_with("x", RunOptions::new().skills([Skill::key("triage")]))
        .await;
    assert!(matches!(r, Err(Error::Skill(SkillError::NoProvider { key })) if key == "triage"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_without_skills_is_refused_never_silently_ignored() {
    let (state, ws, cache) = (tmp(), tmp(), tmp());
    let _ = state;
    // Cursor Agent has no way to take skill directories (its descriptor says so).
    let cursor = adaptor::Driver::from_file(driver_path("cursor")).unwrap();
    let agent = agent_builder(cursor, ws.path())
        .skill_cache(cache.path())
        .skills([Skill::inline("greet", skill_md("greet", "Say hello"))])
        .build();
    assert!(!agent.driver().descriptor().skills);
    let (events, r) = collect(agent.stream("hello")).await;
    assert!(events.is_empty());
    assert!(
        matches!(r, Err(Error::SkillsUnsupported { ref driver, count: 1 }) if driver == "cursor"),
        "{r:?}"
    );
    let inspection = agent.inspect().await.unwrap();
    assert!(
        matches!(&inspection.skills, Availability::Unsupported { reason } if reason.contains("1 skill")),
        "{:?}",
        inspection.skills
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_the_skills_a_run_would_see() {
    let (state, ws, cache) = (tmp(), tmp(), tmp());
    let agent = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .skill_provider(Catalogue)
        .skills([
            Skill::inline("greet", skill_md("greet", "Say hello")),
            Skill::key("triage"),
        ])
        .build();
    let inspection = agent.inspect().await.unwrap();
    let Availability::Supported { value: skills } = &inspection.skills else {
        panic!("{:?}", inspection.skills);
    };
    let listed: Vec<(&str, Option<&str>)> = skills
        .iter()
        .map(|s| (s.key.as_str(), s.description.as_deref()))
        .collect();
    assert_eq!(
        listed,
        [
            ("greet", Some("Say hello")),
            ("triage", Some("Sort issues"))
        ]
    );
    assert!(
        skills
            .iter()
            .all(|s| s.dir.join("SKILL.md").is_file() && s.fingerprint.starts_with("sha256:"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skill_set_is_part_of_the_thread_fingerprint() {
    let (state, ws, cache) = (tmp(), tmp(), tmp());
    let store: Arc<dyn ThreadStore> = Arc::new(MemoryStore::new());
    let agent = agent_builder(reference(state.path()), ws.path())
        .skill_cache(cache.path())
        .shared_thread_store(store)
        .build();
    let v1 = || RunOptions::new().skills([Skill::inline("greet", skill_md("greet", "v1"))]);
    agent.thread("t").run_with("one", v1()).await.unwrap();
    // Same skills: resumes. Other contents under the same key, or no skills: refused.
    agent.thread("t").run_with("two", v1()).await.unwrap();
    for options in [
        RunOptions::new().skills([Skill::inline("greet", skill_md("greet", "v2"))]),
        RunOptions::new(),
    ] {
        let (events, r) = collect(agent.thread("t").stream_with("three", options)).await;
        assert!(events.is_empty());
        assert!(
            matches!(r, Err(Error::Thread(ThreadError::Incompatible { .. }))),
            "{r:?}"
        );
    }
}
