//! The run's instructions bundle, as a driver passes it on.
//!
//! The host checks an instructions bundle (an `AGENTS.md`-style set of files), writes it
//! read-only under the run's private directory and sends its directory, entry file, entry
//! text and file list in the run's resources. [`with_bundle`] folds it into the request's
//! `instructions` (the text a driver appends to the CLI's system prompt): the caller's
//! instructions, then the entry's text, then a line saying where the bundle is so the model
//! can read the files the entry refers to. The SDK's glue does this before
//! [`Session::from_resources`](crate::Session::from_resources) is called, so a driver whose CLI
//! takes appended instructions supports bundles without code of its own.
//!
//! No CLI's protocol lives here.

use crate::InstructionsBundle;

/// `instructions` with `bundle` appended (see the module docs); `instructions` unchanged
/// when there is no bundle.
pub fn with_bundle(
    instructions: Option<String>,
    bundle: Option<&InstructionsBundle>,
) -> Option<String> {
    let Some(bundle) = bundle else {
        return instructions;
    };
    let others: Vec<&str> = bundle
        .files
        .iter()
        .map(String::as_str)
        .filter(|f| *f != bundle.entry)
        .collect();
    let mut text = String::new();
    if let Some(own) = instructions.filter(|t| !t.trim().is_empty()) {
        text.push_str(own.trim_end());
        text.push_str("\n\n");
    }
    text.push_str(bundle.entry_text.trim_end());
    text.push_str(&format!(
        "\n\n(These instructions are `{}` from the instructions bundle in {}",
        bundle.entry, bundle.dir
    ));
    if others.is_empty() {
        text.push_str(".)");
    } else {
        text.push_str(&format!(
            "; paths in them are relative to that directory, which also holds: {}.)",
            others.join(", ")
        ));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[&str]) -> InstructionsBundle {
        InstructionsBundle {
            dir: "/tmp/run/instructions".into(),
            entry: "AGENTS.md".into(),
            entry_text: "Use tabs.\n".into(),
            files: files.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    #[test]
    fn the_bundle_follows_the_callers_instructions_and_says_where_it_is() {
        assert_eq!(with_bundle(Some("x".into()), None).as_deref(), Some("x"));
        let b = bundle(&["AGENTS.md", "docs/style.md"]);
        assert_eq!(
            with_bundle(Some("Be brief.".into()), Some(&b)).unwrap(),
            "Be brief.\n\nUse tabs.\n\n(These instructions are `AGENTS.md` from the \
             instructions bundle in /tmp/run/instructions; paths in them are relative to that \
             directory, which also holds: docs/style.md.)"
        );
        assert_eq!(
            with_bundle(None, Some(&bundle(&["AGENTS.md"]))).unwrap(),
            "Use tabs.\n\n(These instructions are `AGENTS.md` from the instructions bundle in \
             /tmp/run/instructions.)"
        );
    }
}
