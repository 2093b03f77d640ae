//! Reading the run request's skill directories.
//!
//! The host materializes a run's skills as one bundle: `<root>/skills/<key>/SKILL.md` per
//! skill, plus `<root>/.claude-plugin/plugin.json` naming the bundle `adaptor` — the plugin
//! layout Claude Code's `--plugin-dir` loads. Every `skill-dirs` entry of a request is such a
//! `<root>/skills/<key>`, absolute, readable (and executable) by the CLI, never writable.
//! [`skill_bundle`] recovers the two paths a CLI is usually given: the bundle root (a plugin
//! dir) and the directory holding the skills (a skill root, e.g. Codex's extra roots).
//!
//! No CLI's protocol lives here; a driver picks what its CLI accepts.

/// The paths of a run's skill bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillBundle {
    /// `<root>`: the plugin directory (`.claude-plugin/plugin.json` + `skills/`).
    pub root: String,
    /// `<root>/skills`: the directory whose subdirectories are the skills.
    pub skills_dir: String,
    /// The skills' keys (their directory names), in request order.
    pub keys: Vec<String>,
}

/// The bundle the request's `skill-dirs` belong to: `Ok(None)` when there are none, an
/// error (for `start-error::invalid-request`) when they do not share one `<root>/skills`
/// parent or are not absolute — a host that breaks the layout is refused, never guessed at.
pub fn skill_bundle(skill_dirs: &[String]) -> Result<Option<SkillBundle>, String> {
    let Some(first) = skill_dirs.first() else {
        return Ok(None);
    };
    let split = |dir: &str| -> Result<(String, String), String> {
        let dir = dir.trim_end_matches('/');
        let (parent, key) = dir
            .rsplit_once('/')
            .ok_or_else(|| format!("skill dir {dir:?} is not an absolute path"))?;
        if !dir.starts_with('/') || key.is_empty() || !parent.ends_with("/skills") {
            return Err(format!(
                "skill dir {dir:?} is not `<root>/skills/<key>` (an absolute path in the host's skill bundle)"
            ));
        }
        Ok((parent.to_owned(), key.to_owned()))
    };
    let (skills_dir, _) = split(first)?;
    let mut keys = Vec::with_capacity(skill_dirs.len());
    for dir in skill_dirs {
        let (parent, key) = split(dir)?;
        if parent != skills_dir {
            return Err(format!(
                "skill dirs {first:?} and {dir:?} are in different bundles (one `<root>/skills` parent expected)"
            ));
        }
        keys.push(key);
    }
    let root = skills_dir
        .strip_suffix("/skills")
        .unwrap_or_default()
        .to_owned();
    if root.is_empty() {
        return Err(format!(
            "skill dir {first:?} has no bundle root above `skills`"
        ));
    }
    Ok(Some(SkillBundle {
        root,
        skills_dir,
        keys,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bundle_gives_its_root_and_keys() {
        let dirs = vec![
            "/c/sets/ab/skills/one".to_owned(),
            "/c/sets/ab/skills/two".to_owned(),
        ];
        let b = skill_bundle(&dirs).unwrap().unwrap();
        assert_eq!(b.root, "/c/sets/ab");
        assert_eq!(b.skills_dir, "/c/sets/ab/skills");
        assert_eq!(b.keys, ["one", "two"]);
        assert_eq!(skill_bundle(&[]).unwrap(), None);
    }

    #[test]
    fn other_layouts_are_refused() {
        for dirs in [
            vec!["relative/skills/a".to_owned()],
            vec!["/x/notskills/a".to_owned()],
            vec!["/skills/a".to_owned()],
            vec!["/r1/skills/a".to_owned(), "/r2/skills/b".to_owned()],
        ] {
            assert!(skill_bundle(&dirs).is_err(), "{dirs:?}");
        }
    }
}
