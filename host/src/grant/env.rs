//! The environment a driver may not set: loader, interpreter, shell and tool-config
//! variables, and the variables that say where the CLI or its tools find their
//! configuration. Each one lets whoever sets it run code of their choosing as the host user
//! (`LD_PRELOAD`, `NODE_OPTIONS=--require`, `BASH_ENV`, a git `core.fsmonitor` through
//! `GIT_CONFIG_*`, hooks in a `settings.json` under a `CLAUDE_CONFIG_DIR` of the driver's
//! private files) or moves the CLI's state out of its confinement (`HOME`, `TMPDIR`,
//! `XDG_*`, `CODEX_HOME`).
//!
//! A denylist is never complete: it stops the known code-injection routes early, with an
//! error naming the variable, while the kernel confinement (`process`) bounds whatever a
//! missed variable could still do. Must not: spawn, or look at values (a name is denied
//! whatever its value).

use crate::error::LaunchRefusal;

/// Environment variable names (a trailing `*` matches any suffix) that a driver's launch may
/// not set. The caller may still set them (`AgentBuilder::env`, `pass_env`), and may let
/// drivers set one by exact name with
/// [`Containment::allow_driver_env`](crate::Containment::allow_driver_env).
pub const DRIVER_ENV_DENYLIST: &[&str] = &[
    // Dynamic loaders (glibc, musl, macOS) and glibc's own hooks.
    "LD_*",
    "DYLD_*",
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "MALLOC_*",
    "HOSTALIASES",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    // Interpreters: preload and module search paths.
    "NODE_*",
    "BUN_*",
    "DENO_*",
    "NPM_CONFIG_*",
    "npm_config_*",
    "PYTHON*",
    "PERL5*",
    "PERLLIB",
    "PERL_*",
    "RUBY*",
    "GEM_*",
    "BUNDLE_*",
    "LUA_*",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CARGO_*",
    "RUSTC*",
    "RUSTDOC*",
    "RUSTFLAGS",
    "GOFLAGS",
    "GOPATH",
    "GOROOT",
    // Shells.
    "BASH_ENV",
    "BASH_FUNC_*",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "ZDOTDIR",
    "SHELL",
    // Tools that run other programs or read their config from the environment.
    "GIT_*",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "BROWSER",
    "SSH_*",
    "SUDO_ASKPASS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DBUS_SESSION_BUS_ADDRESS",
    // Where things are: the search path, home, temporary files, XDG directories.
    "PATH",
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_*",
    // The agent CLIs' own configuration, state and command hooks.
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_SECURESTORAGE_CONFIG_DIR",
    "CLAUDE_ENV_FILE",
    "CLAUDE_CODE_SHELL_PREFIX",
    "CLAUDE_CODE_GIT_BASH_PATH",
    "CODEX_HOME",
    "CODEX_SANDBOX*",
    "CURSOR_*",
    "CODEBUDDY_*",
    "GEMINI_CLI_*",
    "GEMINI_CONFIG_DIR",
    "QWEN_*",
    "OPENCODE_*",
    "REFERENCE_PROVIDER_STATE_DIR",
];

/// Variables that tell a CLI where to send its requests (a leading `*` matches any prefix, a
/// trailing one any suffix). A driver may not set one while the provider's environment holds
/// a secret the caller put there (a secret-looking name: `*_API_KEY`, `*TOKEN*`, …): the
/// caller's credential would go to the driver's endpoint. The caller may still set them, or
/// allow one by exact name with
/// [`Containment::allow_driver_env`](crate::Containment::allow_driver_env).
pub const DRIVER_ENDPOINT_VARIABLES: &[&str] = &[
    "*_BASE_URL",
    "*_API_URL",
    "*_API_BASE",
    "*_ENDPOINT",
    "*_HOST",
    "*_PROXY",
    "*_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// `name` matches `rule` (a `*` at either end is a wildcard).
fn matches(rule: &str, name: &str) -> bool {
    if let Some(suffix) = rule.strip_prefix('*') {
        name.ends_with(suffix)
    } else if let Some(prefix) = rule.strip_suffix('*') {
        name.starts_with(prefix)
    } else {
        name == rule
    }
}

/// Whether the driver's `launch-env` declaration covers `name` (an exact entry, or a prefix
/// entry ending in `*`).
pub(crate) fn declared(name: &str, declared: &[String]) -> bool {
    declared.iter().any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
        None => entry == name,
    })
}

/// The denylist entry that covers `name`, if any.
pub(crate) fn denied_by(name: &str) -> Option<&'static str> {
    DRIVER_ENV_DENYLIST
        .iter()
        .copied()
        .find(|rule| matches(rule, name))
}

/// The endpoint rule that covers `name`, if any.
pub(crate) fn endpoint_rule(name: &str) -> Option<&'static str> {
    DRIVER_ENDPOINT_VARIABLES
        .iter()
        .copied()
        .find(|rule| matches(rule, name))
}

/// Check one variable of a driver's launch: refused when the denylist covers it, or when it
/// is an endpoint variable and `secret` names a caller secret in the provider's environment —
/// unless the caller allowed the name.
pub(crate) fn check_driver_var(
    name: &str,
    allowed: &[String],
    secret: Option<&str>,
) -> Result<(), LaunchRefusal> {
    if allowed.iter().any(|a| a == name) {
        return Ok(());
    }
    if let Some(rule) = denied_by(name) {
        return Err(LaunchRefusal::DeniedEnv {
            name: name.to_owned(),
            rule: rule.to_owned(),
        });
    }
    if let (Some(rule), Some(secret)) = (endpoint_rule(name), secret) {
        return Err(LaunchRefusal::EndpointWithSecret {
            name: name.to_owned(),
            rule: rule.to_owned(),
            secret: secret.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_launch_env_declaration_covers_exact_names_and_prefixes() {
        let declared = vec!["IS_SANDBOX".to_owned(), "ADAPTOR_MCP_HEADER_*".to_owned()];
        assert!(super::declared("IS_SANDBOX", &declared));
        assert!(super::declared("ADAPTOR_MCP_HEADER_0", &declared));
        assert!(!super::declared("IS_SANDBOX2", &declared));
        assert!(!super::declared("ADAPTOR_MCP", &declared));
        assert!(!super::declared("ANY", &["*".to_owned()]));
        assert!(!super::declared("ANY", &[]));
    }

    use super::*;

    #[test]
    fn the_attack_variables_of_the_threat_model_are_denied() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "NODE_PATH",
            "BUN_OPTIONS",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PERL5OPT",
            "RUBYOPT",
            "BASH_ENV",
            "BASH_FUNC_ls%%",
            "ENV",
            "SHELLOPTS",
            "PS4",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_SSH_COMMAND",
            "GIT_EXEC_PATH",
            "PATH",
            "HOME",
            "TMPDIR",
            "XDG_CONFIG_HOME",
            "CLAUDE_CONFIG_DIR",
            "CODEX_HOME",
        ] {
            assert!(denied_by(name).is_some(), "{name} must be denied");
        }
    }

    #[test]
    fn every_profile_variable_is_the_hosts_to_set() {
        for name in crate::descriptor::PROFILE_VARIABLES {
            assert!(
                denied_by(name).is_some(),
                "{name}: a driver must not set it"
            );
        }
    }

    #[test]
    fn ordinary_variables_pass_and_the_caller_may_allow_a_name() {
        for name in [
            "IS_SANDBOX",
            "ANTHROPIC_MODEL",
            "NO_COLOR",
            "LANG",
            "TERMINAL",
        ] {
            assert_eq!(check_driver_var(name, &[], None), Ok(()), "{name}");
        }
        assert_eq!(
            check_driver_var("NODE_OPTIONS", &[], None),
            Err(LaunchRefusal::DeniedEnv {
                name: "NODE_OPTIONS".into(),
                rule: "NODE_*".into()
            })
        );
        assert_eq!(
            check_driver_var("NODE_OPTIONS", &["NODE_OPTIONS".into()], None),
            Ok(())
        );
        // Allowing one name does not allow its neighbours.
        assert!(check_driver_var("NODE_PATH", &["NODE_OPTIONS".into()], None).is_err());
    }

    #[test]
    fn endpoint_variables_are_refused_only_while_a_caller_secret_is_present() {
        for name in [
            "ANTHROPIC_BASE_URL",
            "OPENAI_BASE_URL",
            "AZURE_OPENAI_ENDPOINT",
            "OLLAMA_HOST",
            "HTTPS_PROXY",
            "https_proxy",
            "NO_PROXY",
            "GOOGLE_GEMINI_BASE_URL",
        ] {
            assert_eq!(
                check_driver_var(name, &[], None),
                Ok(()),
                "{name}: no secret"
            );
            assert_eq!(
                check_driver_var(name, &[], Some("ANTHROPIC_API_KEY")),
                Err(LaunchRefusal::EndpointWithSecret {
                    name: name.into(),
                    rule: endpoint_rule(name).unwrap().into(),
                    secret: "ANTHROPIC_API_KEY".into(),
                }),
                "{name}"
            );
            assert_eq!(
                check_driver_var(name, &[name.to_owned()], Some("ANTHROPIC_API_KEY")),
                Ok(()),
                "{name}: allowed by the caller"
            );
        }
        assert_eq!(
            check_driver_var("ANTHROPIC_MODEL", &[], Some("K_TOKEN")),
            Ok(())
        );
    }
}
