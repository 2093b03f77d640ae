//! Subcommands whose arguments are built only when clap needs them.
//!
//! Owns [`Deferred`], the wrapper the command tree (`main.rs`) puts around each subcommand's
//! arguments, and [`expanded`], the tree built whole. Must not: change what any command
//! accepts or prints (`main.rs`'s tests compare every command's help and errors with the
//! tree built whole).

use clap::{ArgMatches, Args, Command, Error, FromArgMatches, Subcommand};

/// A subcommand's arguments (`T: Args`) or subcommands (`T: Subcommand`), added to its
/// `Command` only when clap builds that command (`Command::defer`): when it is the one
/// invoked, or for its help. Its name, description and settings stay on the variant, so
/// `adaptor --help` and the suggestions for a mistyped command need none of it. Measured
/// (docs/performance.md, "The host's own overhead"): short commands such as
/// `adaptor --version` 0.16 ms faster; `adaptor run`, which builds its own large argument set
/// anyway, no measurable change.
///
/// Completions are generated from the whole tree built at once ([`expanded`]): clap
/// copies the tree as it stands into the `help` subcommand's, which completion scripts
/// describe.
pub(crate) struct Deferred<T>(pub(crate) T);

thread_local! {
    /// Whether [`Deferred`] adds its part at once: only while [`expanded`] builds.
    static EXPAND_ALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The tree `build` makes, with every [`Deferred`] part added at once.
pub(crate) fn expanded(build: fn() -> Command) -> Command {
    EXPAND_ALL.set(true);
    let cmd = build();
    EXPAND_ALL.set(false);
    cmd
}

/// `augment` (a derive's `augment_*` of `T`) added to `cmd` now, or deferred to its build.
fn defer_augment(cmd: Command, augment: fn(Command) -> Command) -> Command {
    if EXPAND_ALL.get() {
        augment(cmd)
    } else {
        cmd.defer(augment)
    }
}

/// `augment` (a derive's `augment_*`) applied to `cmd`, keeping the about and long about
/// the variant set: a derive's `augment_*` sets them from the type's doc comment, which
/// would otherwise replace the variant's when the deferred part is added after it.
fn keeping_texts(cmd: Command, augment: fn(Command) -> Command) -> Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let cmd = augment(cmd);
    let cmd = match about {
        Some(about) => cmd.about(about),
        None => cmd.about(None::<&str>),
    };
    match long_about {
        Some(long_about) => cmd.long_about(long_about),
        None => cmd.long_about(None::<&str>),
    }
}

/// `T`'s arguments, as [`Deferred`] adds them.
fn args<T: Args>(cmd: Command) -> Command {
    keeping_texts(cmd, T::augment_args)
}

/// `T`'s arguments for `clap`'s update form, as [`Deferred`] adds them.
fn args_for_update<T: Args>(cmd: Command) -> Command {
    keeping_texts(cmd, T::augment_args_for_update)
}

/// `T`'s subcommands, as [`Deferred`] adds them.
fn subcommands<T: Subcommand>(cmd: Command) -> Command {
    keeping_texts(cmd, T::augment_subcommands)
}

/// `T`'s subcommands for `clap`'s update form, as [`Deferred`] adds them.
fn subcommands_for_update<T: Subcommand>(cmd: Command) -> Command {
    keeping_texts(cmd, T::augment_subcommands_for_update)
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: Command) -> Command {
        defer_augment(cmd, args::<T>)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        defer_augment(cmd, args_for_update::<T>)
    }
}

impl<T: Subcommand> Subcommand for Deferred<T> {
    fn augment_subcommands(cmd: Command) -> Command {
        defer_augment(cmd, subcommands::<T>)
    }

    fn augment_subcommands_for_update(cmd: Command) -> Command {
        defer_augment(cmd, subcommands_for_update::<T>)
    }

    fn has_subcommand(name: &str) -> bool {
        T::has_subcommand(name)
    }
}
