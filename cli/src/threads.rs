//! `adaptor threads list|show|fork|archive` and opening the thread store for `run --thread`.
//!
//! Owns the store choice (`--store PATH|URL`, default the SQLite file under the user's data
//! directory) and the readable / JSON views of thread records. Must not: run providers
//! itself — `fork` goes through the same `run` path as `adaptor run`.

use std::process::ExitCode;
use std::sync::Arc;

use adaptor::store::{
    ListQuery, PostgresStore, Query, RecordStatus, SqliteStore, ThreadRecord, ThreadStore,
    lease_target_for_key, new_owner,
};

use crate::output::{ColorChoice, sanitize};
use crate::run::RunArgs;
use crate::settings::{self, Flags};
use crate::{EXIT_RUN_FAILED, EXIT_USAGE, errln, outln};

/// Examples shown by `adaptor threads --help`.
pub const EXAMPLES: &str = "\
Examples:
  adaptor run --thread ticket-42 \"Find the flaky test\"    # starts (or continues) a thread
  adaptor threads list
  adaptor threads show ticket-42 --json
  adaptor threads fork ticket-42 --thread ticket-42/alt \"Try another approach\"
  adaptor threads archive ticket-42                       # the next run starts fresh";

/// `adaptor threads …`.
#[derive(clap::Subcommand)]
pub(crate) enum ThreadsCommand {
    /// List threads (active ones; `--all` adds archived records).
    List {
        /// Include archived records.
        #[arg(long)]
        all: bool,
        /// Thread store (see `adaptor run --store`).
        #[arg(long, value_name = "PATH|URL")]
        store: Option<String>,
        /// Print records as JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// Show a thread's active record and its archived history.
    Show {
        /// The thread key.
        key: String,
        /// Thread store.
        #[arg(long, value_name = "PATH|URL")]
        store: Option<String>,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Fork thread PARENT into NEW_KEY by running PROMPT there (the run options are those of
    /// `adaptor run`; `--thread` is NEW_KEY).
    Fork {
        /// The thread to fork.
        parent: String,
        /// Run options; `--thread NEW_KEY` names the new thread.
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// Archive a thread's active record: the next `run --thread KEY` starts a new session.
    Archive {
        /// The thread key.
        key: String,
        /// Thread store.
        #[arg(long, value_name = "PATH|URL")]
        store: Option<String>,
    },
}

/// Open `--store` (a `postgres://` / `postgresql://` URL or a SQLite path) or the default
/// SQLite store.
pub(crate) async fn open_store(store: Option<&str>) -> Result<Arc<dyn ThreadStore>, ExitCode> {
    let opened: Result<Arc<dyn ThreadStore>, String> = match store {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            PostgresStore::connect(url)
                .await
                .map(|s| Arc::new(s) as Arc<dyn ThreadStore>)
                .map_err(|e| e.to_string())
        }
        Some(path) => SqliteStore::open(path)
            .map(|s| Arc::new(s) as Arc<dyn ThreadStore>)
            .map_err(|e| e.to_string()),
        None => SqliteStore::open_default()
            .map(|s| Arc::new(s) as Arc<dyn ThreadStore>)
            .map_err(|e| e.to_string()),
    };
    opened.map_err(|e| {
        errln!("adaptor: cannot open the thread store: {}", sanitize(&e));
        ExitCode::from(EXIT_USAGE)
    })
}

/// The store a `threads` subcommand uses: `--store`, else `store` in the config file, else
/// the default SQLite file.
async fn store_for(flag: Option<&str>) -> Result<Arc<dyn ThreadStore>, ExitCode> {
    let settings = settings::resolve(&Flags {
        store: flag,
        ..Flags::default()
    })
    .map_err(|e| {
        errln!("adaptor: {}", sanitize(&e.0));
        ExitCode::from(EXIT_USAGE)
    })?;
    open_store(settings.store.value.as_deref()).await
}

pub(crate) async fn main(cmd: ThreadsCommand, color: ColorChoice) -> ExitCode {
    match cmd {
        ThreadsCommand::List { all, store, json } => {
            let store = match store_for(store.as_deref()).await {
                Ok(s) => s,
                Err(code) => return code,
            };
            let query = ListQuery {
                include_archived: all,
                ..ListQuery::default()
            };
            match store.list(&query).await {
                Ok(records) => {
                    if !json && records.is_empty() {
                        errln!("adaptor: no threads");
                    }
                    for r in &records {
                        print_record(r, json);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => store_failed(&e),
            }
        }
        ThreadsCommand::Show { key, store, json } => {
            let store = match store_for(store.as_deref()).await {
                Ok(s) => s,
                Err(code) => return code,
            };
            let query = ListQuery {
                include_archived: true,
                key: Some(key.clone()),
                limit: None,
            };
            match store.list(&query).await {
                Ok(records) if records.is_empty() => {
                    errln!("adaptor: no thread {:?}", sanitize(&key));
                    ExitCode::from(EXIT_RUN_FAILED)
                }
                Ok(records) => {
                    for r in &records {
                        print_record(r, json);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => store_failed(&e),
            }
        }
        ThreadsCommand::Fork { parent, run } => {
            if run.thread.is_none() {
                errln!("adaptor: threads fork needs --thread NEW_KEY");
                return ExitCode::from(EXIT_USAGE);
            }
            match crate::run::configure(&run, None) {
                Ok(configured) => {
                    crate::run::run(
                        *run,
                        configured,
                        Some(parent),
                        color,
                        crate::interrupt::Source::Signal,
                    )
                    .await
                }
                Err(code) => code,
            }
        }
        ThreadsCommand::Archive { key, store } => {
            let store = match store_for(store.as_deref()).await {
                Ok(s) => s,
                Err(code) => return code,
            };
            archive(store.as_ref(), &key).await
        }
    }
}

/// Archive under the key's lease, so a run in progress is never archived underneath.
async fn archive(store: &dyn ThreadStore, key: &str) -> ExitCode {
    let lease = match store
        .acquire_lease(
            &lease_target_for_key(key),
            &new_owner(),
            adaptor::DEFAULT_LEASE_TTL,
        )
        .await
    {
        Ok(l) => l,
        Err(e) => return store_failed(&e),
    };
    let outcome = match store.resolve(&Query::Key(key.to_owned())).await {
        Ok(Some(record)) => store
            .archive(&record.id, std::slice::from_ref(&lease))
            .await
            .map(|()| Some(record.id)),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let released = store.release_lease(&lease).await;
    let code = match outcome {
        Ok(Some(id)) => {
            outln!("archived {} (thread {:?})", id, sanitize(key));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            errln!("adaptor: thread {:?} has no active record", sanitize(key));
            ExitCode::from(EXIT_RUN_FAILED)
        }
        Err(e) => store_failed(&e),
    };
    if let Err(e) = released {
        errln!(
            "adaptor: releasing the lease failed (it lapses after {} s): {}",
            adaptor::DEFAULT_LEASE_TTL.as_secs(),
            sanitize(&e.to_string())
        );
    }
    code
}

fn store_failed(e: &adaptor::store::StoreError) -> ExitCode {
    errln!("adaptor: {}", sanitize(&e.to_string()));
    ExitCode::from(EXIT_RUN_FAILED)
}

fn print_record(r: &ThreadRecord, json: bool) {
    if json {
        match serde_json::to_string(r) {
            Ok(line) => outln!("{line}"),
            Err(e) => errln!("adaptor: cannot serialise record {}: {e}", r.id),
        }
        return;
    }
    let age = r
        .updated_at
        .elapsed()
        .map(|d| format!("{}s ago", d.as_secs()))
        .unwrap_or_else(|_| "just now".into());
    let status = match r.status {
        RecordStatus::Active => "active  ",
        RecordStatus::Archived => "archived",
    };
    outln!(
        "{:?}  {status}  {}  driver {}{}  session {}  turns {}  updated {age}{}",
        sanitize(&r.key),
        r.id,
        sanitize(&r.driver),
        if r.component.is_empty() {
            String::new()
        } else {
            format!(" (sha256 {})", sanitize(&r.component))
        },
        sanitize(r.state.display_id.as_deref().unwrap_or(&r.state.resume_id)),
        r.turns,
        r.parent_id
            .as_deref()
            .map(|p| format!("  forked from {p}"))
            .unwrap_or_default()
    );
}
