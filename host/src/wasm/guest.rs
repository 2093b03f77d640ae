//! Running driver code: one wasmtime `Store` per instance, with the sandbox baseline.
//!
//! Owns: the store data (an empty WASI context, memory limits, a bounded stderr sink, the
//! `log` import), the per-call epoch deadline and hostcall fuel, and turning every trap into
//! [`Error::DriverTrap`] naming the driver and the call. A trapped instance is poisoned and
//! never entered again (the pipeline drops it; the next run instantiates afresh).
//! Must not: spawn processes or interpret actions (the pipeline does).

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceAny, ResourceTable};
use wasmtime::{Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{DriverWorld, DriverWorldPre, wit, wit_session};
use super::convert::{self, DriverRequest};
use super::engine::{Ticking, engine};
use super::since_v0_1_0 as v0_1_0;
use super::since_v0_2_0 as v0_2_0;
use crate::error::{Error, Limit, LoadError, StartRefusal};
use crate::session::{
    Action, ConfigRejection, Decision, DriverOutcome, Launch, Probe, ProbeOutput, SessionExit,
};

/// The seed of every random source a driver sees (WASI `random`, `insecure`,
/// `insecure-seed`): fixed, so two instances of a driver see the same values and a driver is
/// as deterministic as the WIT promises (replays, conformance and fuzzing rely on it). A
/// driver holds no secrets and needs no unpredictable randomness.
pub(crate) const GUEST_RANDOM_SEED: u64 = 0x6164_6170_746f_7221;

/// The clocks a driver sees: stopped at the Unix epoch (wall clock) and at zero (monotonic
/// clock). The host stamps events and measures time; a driver that reads a clock learns
/// nothing about the machine, and one that waits for time to pass spins into its CPU deadline.
struct StoppedClock;

impl wasmtime_wasi::HostWallClock for StoppedClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A WASI pollable that is always ready: what every clock subscription of a driver returns.
/// A sans-IO driver has nothing to wait for, so no guest call can block in the host: a
/// guest `sleep` returns at once, and a guest that polls in a loop burns its fuel.
struct Ready;

impl wasmtime_wasi::p2::Pollable for Ready {
    fn ready<'life0, 'async_trait>(
        &'life0 mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(std::future::ready(()))
    }
}

/// The monotonic clock a driver sees: stopped at zero ([`StoppedClock`]), and every
/// subscription (`subscribe-duration`, `subscribe-instant`) [`Ready`] at once. Shadows
/// wasmtime-wasi's clock, whose subscriptions sleep on the host's timer.
struct ReadyClock<'a> {
    table: &'a mut ResourceTable,
}

impl wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host for ReadyClock<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(0)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(1_000_000_000)
    }

    fn subscribe_instant(
        &mut self,
        _when: u64,
    ) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let ready = self.table.push(Ready)?;
        wasmtime_wasi::p2::subscribe(self.table, ready)
    }

    fn subscribe_duration(
        &mut self,
        _duration: u64,
    ) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let ready = self.table.push(Ready)?;
        wasmtime_wasi::p2::subscribe(self.table, ready)
    }
}

/// [`wasmtime::component::HasData`] for [`ReadyClock`].
struct ReadyClocks;

impl wasmtime::component::HasData for ReadyClocks {
    type Data<'a> = ReadyClock<'a>;
}

/// The WASI world of a driver, written out as data. Everything is denied or fixed:
/// - no stdin (closed), stdout discarded, stderr kept in a bounded buffer (panic messages);
/// - no arguments, no environment variables, no preopened directories (so no files);
/// - sockets: TCP, UDP and name lookup denied, and every address refused;
/// - clocks stopped ([`StoppedClock`]) and random sources seeded ([`GUEST_RANDOM_SEED`]).
fn sandbox_wasi(stderr: MemoryOutputPipe) -> WasiCtx {
    use rand::SeedableRng;
    let mut builder = WasiCtxBuilder::new();
    builder
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .wall_clock(StoppedClock)
        .monotonic_clock(StoppedClock)
        .secure_random(rand::rngs::StdRng::seed_from_u64(GUEST_RANDOM_SEED))
        .insecure_random(rand::rngs::StdRng::seed_from_u64(GUEST_RANDOM_SEED))
        .insecure_random_seed(u128::from(GUEST_RANDOM_SEED));
    builder.build()
}

/// Sandbox limits applied to every driver instance (one instance per run), and the host
/// resources a driver's actions may hold across calls (timers, stdin, approvals, events,
/// private files). Exceeding one stops the run with [`Error::LimitExceeded`] naming the
/// driver, the call (or action) and the limit actually hit.
///
/// Guest CPU is measured in wasmtime *fuel* — units of executed WebAssembly, about one per
/// instruction — not in time: the same driver on the same input uses the same fuel on a quiet
/// machine and on one busy with other work, so a busy host never fails a run that a quiet one
/// passes. A separate, generous wall-clock bound per call (`call_wall`) backs the fuel up
/// (a call cannot wait: the driver's clock subscriptions are ready at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLimits {
    /// Linear memory cap per instance, bytes.
    pub memory_bytes: usize,
    /// Guest CPU per call, in fuel (default 2·10⁹; a tight guest loop got through 2·10¹⁰
    /// in under a second on this project's 2-core machine, seen once in the hostile suite's
    /// cancel test, not benchmarked; the built-in parsers use well under 1 % of it per
    /// 64 KiB chunk).
    pub call_fuel: u64,
    /// Wall-clock time per call (default 10 s), counted in 10 ms epoch ticks: the bound for a
    /// call that runs too long on a slow or overloaded machine.
    pub call_wall: Duration,
    /// Bytes a guest may pass to a host import in one call.
    pub hostcall_bytes: usize,
    /// Bytes of guest stderr kept (panic messages).
    pub stderr_bytes: usize,
    /// Guest CPU over all calls of one turn of an instance, in fuel (default 6·10¹⁰).
    pub run_fuel: u64,
    /// Actions one call may return.
    pub actions_per_call: usize,
    /// Log messages one call may write.
    pub logs_per_call: u32,
    /// Timers a driver may have set at once (default 256).
    pub timers_live: usize,
    /// Timer fires in one turn (default 100 000): a driver that re-arms a 0 ms timer forever
    /// ends with [`Limit::TimerFiresPerTurn`] even without a run timeout.
    pub timer_fires_per_turn: u64,
    /// Bytes a driver may write to the provider's stdin in one turn (default 64 MiB). The
    /// raw capture keeps every byte written, so the total is what bounds the host's memory
    /// (a provider that does not read cannot make the host queue gigabytes).
    pub stdin_bytes_per_turn: usize,
    /// Approval requests pending at once (default 256).
    pub approvals_pending: usize,
    /// Approval requests in one turn (default 10 000).
    pub approvals_per_turn: usize,
    /// Events a driver may emit in one turn (default 10 000 000).
    pub events_per_turn: u64,
    /// Private files one launch may ask for (default 64).
    pub private_files: usize,
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            call_fuel: 2_000_000_000,
            call_wall: Duration::from_secs(10),
            hostcall_bytes: 8 << 20,
            stderr_bytes: 64 << 10,
            run_fuel: 60_000_000_000,
            actions_per_call: 10_000,
            logs_per_call: 1_000,
            timers_live: 256,
            timer_fires_per_turn: 100_000,
            stdin_bytes_per_turn: 64 << 20,
            approvals_pending: 256,
            approvals_per_turn: 10_000,
            events_per_turn: 10_000_000,
            private_files: 64,
        }
    }
}

/// Store data of a driver instance.
pub(crate) struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    driver: Arc<str>,
    /// Log messages written during the current call, and the cap.
    logs_this_call: u32,
    logs_cap: u32,
    /// The run's cancellation and its deadline: a call that has run for
    /// [`INTERRUPT_AFTER_TICKS`] epoch ticks when either has come is interrupted.
    interrupt: Option<Interrupt>,
    /// Epoch ticks the current call has run, and its wall-clock bound in ticks.
    ticks: u64,
    wall_ticks: u64,
    /// The current call was interrupted by the run's cancellation.
    interrupted: bool,
}

/// When a run's long driver calls are interrupted: its cancellation, or its deadline (the run's
/// timeout). Checked on the epoch tick of a running call, so no task has to watch for them.
#[derive(Debug, Clone)]
pub(crate) struct Interrupt {
    /// The run's cancellation.
    pub cancel: tokio_util::sync::CancellationToken,
    /// The run's deadline, if it has a timeout.
    pub deadline: Option<std::time::Instant>,
}

impl Interrupt {
    /// Whether the run was cancelled or is past its deadline.
    pub(crate) fn due(&self) -> bool {
        self.cancel.is_cancelled()
            || self
                .deadline
                .is_some_and(|at| std::time::Instant::now() >= at)
    }
}

/// A call that has been running for this many epoch ticks (50 ms) when the run is cancelled
/// is interrupted; shorter ones finish (an interrupted call poisons the instance, and the
/// turn's outcome is lost with it, so only a call that holds the cancel up is cut).
pub(crate) const INTERRUPT_AFTER_TICKS: u64 = 5;

/// Every epoch tick (10 ms) of a running guest call: interrupt it when the run is cancelled
/// and the call is long, stop it at its wall-clock bound, else yield once and let it run one
/// more tick.
fn on_epoch_tick(
    mut ctx: wasmtime::StoreContextMut<'_, GuestState>,
) -> wasmtime::Result<wasmtime::UpdateDeadline> {
    let s = ctx.data_mut();
    s.ticks += 1;
    if s.ticks >= INTERRUPT_AFTER_TICKS && s.interrupt.as_ref().is_some_and(Interrupt::due) {
        s.interrupted = true;
        return Err(wasmtime::Trap::Interrupt.into());
    }
    if s.ticks >= s.wall_ticks {
        return Err(wasmtime::Trap::Interrupt.into());
    }
    // Yield to the async runtime once per tick: a long call does not hold its worker thread,
    // so the task that cancels the run (Ctrl-C, a `Canceller`) gets to run meanwhile.
    Ok(wasmtime::UpdateDeadline::Yield(1))
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wit::Host for GuestState {}

impl wit_session::Host for GuestState {}

/// `log` of drivers built against `0.1.0` (the same function; its level type is the newest).
impl v0_1_0::adaptor::driver::log::Host for GuestState {
    async fn log(&mut self, level: wit::LogLevel, message: String) {
        crate::wasm::bindings::adaptor::driver::log::Host::log(self, level, message).await
    }
}

impl crate::wasm::bindings::adaptor::driver::log::Host for GuestState {
    async fn log(&mut self, level: wit::LogLevel, message: String) {
        self.logs_this_call = self.logs_this_call.saturating_add(1);
        if self.logs_this_call > self.logs_cap {
            // Over the cap the call fails when it returns (LimitExceeded::LogsPerCall).
            return;
        }
        let driver = &*self.driver;
        let message: String = message.chars().take(4096).collect();
        match level {
            wit::LogLevel::Trace => tracing::trace!(target: "adaptor::driver", driver, "{message}"),
            wit::LogLevel::Debug => tracing::debug!(target: "adaptor::driver", driver, "{message}"),
            wit::LogLevel::Info => tracing::info!(target: "adaptor::driver", driver, "{message}"),
            wit::LogLevel::Warn => tracing::warn!(target: "adaptor::driver", driver, "{message}"),
            wit::LogLevel::Error => tracing::error!(target: "adaptor::driver", driver, "{message}"),
        }
    }
}

/// The linker shared by all drivers: WASI (granting nothing) plus `log`.
pub(crate) fn linker() -> &'static Linker<GuestState> {
    static LINKER: std::sync::OnceLock<Linker<GuestState>> = std::sync::OnceLock::new();
    LINKER.get_or_init(|| {
        let mut linker = Linker::new(engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("link WASI p2");
        // Replace the monotonic clock: its subscriptions are ready at once (nothing blocks).
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<_, ReadyClocks>(
            &mut linker,
            |s: &mut GuestState| ReadyClock {
                table: &mut s.table,
            },
        )
        .expect("link the ready monotonic clock");
        linker.allow_shadowing(false);
        crate::wasm::bindings::adaptor::driver::log::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .expect("link log import");
        // Drivers of the released 0.1.0: their `log` import, and the type-only instance of
        // their `types` (whose types are the newest ones).
        v0_1_0::adaptor::driver::log::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .expect("link the 0.1.0 log import");
        linker
            .instance("adaptor:driver/types@0.1.0")
            .expect("link the 0.1.0 types instance");
        linker
    })
}

/// What a driver may import: the world's own interfaces and the WASI preview-2 families the
/// host links with a context that grants nothing (no preopened directories, no environment
/// or arguments, no network; stdio discarded). Anything else — `wasi:http`, or any foreign
/// interface — is refused at load, by name.
const ALLOWED_IMPORTS: &[&str] = &[
    "adaptor:driver/",
    "wasi:cli/",
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

/// The capability audit: list the component's imports (logged) and refuse any the host does
/// not allow.
pub(crate) fn audit_imports(name: &str, component: &Component) -> Result<Vec<String>, Error> {
    let imports: Vec<String> = component
        .component_type()
        .imports(engine())
        .map(|(import, _)| import.to_owned())
        .collect();
    tracing::info!(driver = name, imports = ?imports, "driver imports audited");
    if let Some(bad) = imports
        .iter()
        .find(|i| !ALLOWED_IMPORTS.iter().any(|p| i.starts_with(p)))
    {
        tracing::warn!(driver = name, import = %bad, "driver refused: forbidden import");
        return Err(Error::Load(LoadError::ForbiddenImport {
            driver: name.to_owned(),
            import: bad.clone(),
        }));
    }
    Ok(imports)
}

/// A driver linked and ready to instantiate (one per loaded driver; opaque outside `wasm/`),
/// in the version of the contract it was built against.
pub(crate) enum DriverPre {
    /// The newest contract, `0.3.0`.
    V0_3(DriverWorldPre<GuestState>),
    /// The released `0.2.0`.
    V0_2(v0_2_0::DriverWorldPre<GuestState>),
    /// The released `0.1.0`.
    V0_1(v0_1_0::DriverWorldPre<GuestState>),
}

/// The version of `adaptor:driver` a component was built against, read from the name of its
/// `driver` export (`adaptor:driver/driver@<version>`); `None` when it exports no such
/// interface.
fn wit_version(component: &Component) -> Option<String> {
    component
        .component_type()
        .exports(engine())
        .find_map(|(name, _)| {
            name.strip_prefix("adaptor:driver/driver@")
                .map(str::to_owned)
        })
}

/// Pre-link a component against the driver world of its version; the error says what is
/// missing, or which version it was built against and which ones this host loads.
pub(crate) fn prepare(name: &str, component: &Component) -> Result<DriverPre, Error> {
    audit_imports(name, component)?;
    let not_a_driver = |reason: String| {
        Error::Load(LoadError::NotADriver {
            driver: name.to_owned(),
            reason,
        })
    };
    let version = wit_version(component).ok_or_else(|| {
        not_a_driver(format!(
            "it does not export the `adaptor:driver/driver` interface (of any version; this \
             host loads {})",
            crate::wasm::SUPPORTED_WIT_VERSIONS.join(", ")
        ))
    })?;
    if !crate::wasm::SUPPORTED_WIT_VERSIONS.contains(&version.as_str()) {
        return Err(Error::Load(LoadError::UnsupportedWitVersion {
            driver: name.to_owned(),
            found: version,
            supported: crate::wasm::SUPPORTED_WIT_VERSIONS
                .iter()
                .map(|v| (*v).to_owned())
                .collect(),
        }));
    }
    let pre = linker().instantiate_pre(component).map_err(|e| {
        not_a_driver(format!(
            "it imports something the host does not provide: {e:#}"
        ))
    })?;
    let mismatch = |e: wasmtime::Error| {
        not_a_driver(format!(
            "its `adaptor:driver/driver@{version}` export does not match the released \
             {version} contract: {e:#}"
        ))
    };
    match version.as_str() {
        "0.1.0" => v0_1_0::DriverWorldPre::new(pre)
            .map(DriverPre::V0_1)
            .map_err(mismatch),
        "0.2.0" => v0_2_0::DriverWorldPre::new(pre)
            .map(DriverPre::V0_2)
            .map_err(mismatch),
        _ => DriverWorldPre::new(pre)
            .map(DriverPre::V0_3)
            .map_err(mismatch),
    }
}

/// An instance's exports, in the version of the contract it was built against.
enum World {
    V0_3(DriverWorld),
    V0_2(v0_2_0::DriverWorld),
    V0_1(v0_1_0::DriverWorld),
}

/// Call a driver-level export with the per-call deadline, turning traps into errors. The
/// function has the same types in every version (`describe` and the session's constructor,
/// which do not, are called by hand).
macro_rules! driver_call {
    ($self:ident, $name:literal, $method:ident $(, $arg:expr)*) => {{
        let _ticking = $self.before_call($name)?;
        let r = match &$self.world {
            World::V0_3(w) => w.adaptor_driver_driver().$method(&mut $self.store $(, $arg)*).await,
            World::V0_2(w) => w.adaptor_driver_driver().$method(&mut $self.store $(, $arg)*).await,
            World::V0_1(w) => w.adaptor_driver_driver().$method(&mut $self.store $(, $arg)*).await,
        };
        $self.after_call($name, r)
    }};
}

/// One instantiated driver.
pub(crate) struct GuestInstance {
    store: Store<GuestState>,
    world: World,
    driver: Arc<str>,
    limits: GuestLimits,
    stderr: MemoryOutputPipe,
    poisoned: bool,
    /// Fuel used by this instance's calls so far (in this turn).
    fuel_used: u64,
    /// The fuel the current call was given, and whether the per-turn budget (not the per-call
    /// one) set it.
    call_fuel: Option<(u64, bool)>,
}

impl GuestLimits {
    /// The per-call wall-clock bound in epoch ticks (at least one).
    fn wall_ticks(&self) -> u64 {
        (self.call_wall.as_millis() / crate::wasm::engine::EPOCH_TICK.as_millis()).max(1) as u64
    }
}

impl GuestInstance {
    /// Interrupt this instance's long calls once `interrupt` is due (`None`: never; only the
    /// per-call wall-clock bound and fuel end them then).
    pub(crate) fn interrupt_on(&mut self, interrupt: Option<Interrupt>) {
        self.store.data_mut().interrupt = interrupt;
    }

    /// The limits it was made with.
    pub(crate) fn limits(&self) -> &GuestLimits {
        &self.limits
    }

    /// Name the driver as its errors and logs will from now on (an instance made before
    /// the descriptor was read is named after the file it came from).
    pub(crate) fn name_driver(&mut self, name: Arc<str>) {
        self.store.data_mut().driver = name.clone();
        self.driver = name;
    }

    /// Instantiate a fresh store.
    pub(crate) async fn new(
        driver: Arc<str>,
        pre: &DriverPre,
        limits: GuestLimits,
    ) -> Result<Self, Error> {
        let stderr = MemoryOutputPipe::new(limits.stderr_bytes);
        let wasi = sandbox_wasi(stderr.clone());
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .trap_on_grow_failure(true)
            .instances(16)
            .tables(16)
            .memories(4)
            .table_elements(100_000)
            .build();
        let mut store = Store::new(
            engine(),
            GuestState {
                wasi,
                table: ResourceTable::new(),
                limits: store_limits,
                driver: driver.clone(),
                logs_this_call: 0,
                logs_cap: limits.logs_per_call,
                interrupt: None,
                ticks: 0,
                wall_ticks: limits.wall_ticks(),
                interrupted: false,
            },
        );
        store.limiter(|s| &mut s.limits);
        store.set_hostcall_fuel(limits.hostcall_bytes);
        store
            .set_fuel(limits.call_fuel.min(limits.run_fuel))
            .expect("the engine consumes fuel");
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(on_epoch_tick);
        let ticking = Ticking::begin();
        let instantiated = match pre {
            DriverPre::V0_3(pre) => pre.instantiate_async(&mut store).await.map(World::V0_3),
            DriverPre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(World::V0_2),
            DriverPre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(World::V0_1),
        };
        drop(ticking);
        let world = instantiated.map_err(|e| Error::DriverTrap {
            driver: driver.to_string(),
            call: "instantiate",
            message: format!("{e:#}"),
        })?;
        Ok(Self {
            store,
            world,
            driver,
            limits,
            stderr,
            poisoned: false,
            fuel_used: 0,
            call_fuel: None,
        })
    }

    fn check_actions(
        &mut self,
        call: &'static str,
        actions: Vec<wit::Action>,
    ) -> Result<Vec<wit::Action>, Error> {
        if actions.len() > self.limits.actions_per_call {
            return Err(self.limit(
                call,
                Limit::ActionsPerCall {
                    max: self.limits.actions_per_call,
                },
            ));
        }
        Ok(actions)
    }

    fn limit(&mut self, call: &'static str, limit: Limit) -> Error {
        self.poisoned = true;
        tracing::warn!(driver = %self.driver, call, %limit, "driver stopped by a limit");
        Error::LimitExceeded {
            driver: self.driver.to_string(),
            call,
            limit,
        }
    }

    /// Ready the store for a call: its fuel, deadline and per-call counters. The returned
    /// guard keeps the epoch ticker running; the caller holds it across the call, so a call
    /// whose future is dropped stops counting with it.
    fn before_call(&mut self, call: &'static str) -> Result<Ticking, Error> {
        if self.poisoned {
            return Err(Error::DriverTrap {
                driver: self.driver.to_string(),
                call,
                message: "the instance trapped earlier and cannot be entered again".into(),
            });
        }
        let left = self.limits.run_fuel.saturating_sub(self.fuel_used);
        let fuel = self.limits.call_fuel.min(left);
        self.store.set_fuel(fuel).expect("the engine consumes fuel");
        self.call_fuel = Some((fuel, left < self.limits.call_fuel));
        self.store.set_epoch_deadline(1);
        let data = self.store.data_mut();
        data.logs_this_call = 0;
        data.ticks = 0;
        data.wall_ticks = self.limits.wall_ticks();
        data.interrupted = false;
        Ok(Ticking::begin())
    }

    fn after_call<R>(&mut self, call: &'static str, r: wasmtime::Result<R>) -> Result<R, Error> {
        let by_run = match self.call_fuel.take() {
            Some((given, by_run)) => {
                let left = self.store.get_fuel().unwrap_or(0);
                self.fuel_used = self.fuel_used.saturating_add(given.saturating_sub(left));
                by_run
            }
            None => false,
        };
        if r.is_err() && self.store.data().interrupted {
            self.poisoned = true;
            tracing::info!(driver = %self.driver, call, "a long driver call was interrupted: the run was cancelled or reached its timeout");
            return Err(Error::DriverTrap {
                driver: self.driver.to_string(),
                call,
                message:
                    "interrupted: the run was cancelled or reached its timeout while this call ran"
                        .into(),
            });
        }
        if let Err(e) = &r
            && let Some(limit) = limit_of(e, self.limits, by_run)
        {
            return Err(self.limit(call, limit));
        }
        if self.store.data().logs_this_call > self.limits.logs_per_call {
            return Err(self.limit(
                call,
                Limit::LogsPerCall {
                    max: self.limits.logs_per_call,
                },
            ));
        }
        if self.fuel_used >= self.limits.run_fuel {
            return Err(self.limit(
                call,
                Limit::CpuPerRun {
                    fuel: self.limits.run_fuel,
                },
            ));
        }
        r.map_err(|e| {
            self.poisoned = true;
            let mut message = describe_trap(&e, self.limits);
            let stderr = self.stderr.contents();
            if !stderr.is_empty() {
                let text = String::from_utf8_lossy(&stderr);
                message.push_str(" — guest stderr: ");
                message.push_str(text.trim());
            }
            tracing::warn!(driver = %self.driver, call, %message, "driver trapped");
            Error::DriverTrap {
                driver: self.driver.to_string(),
                call,
                message,
            }
        })
    }

    /// The driver's descriptor, validated (`Err` names what is wrong with it). A `0.1.0`
    /// driver declares no steering and no launch environment (the denylist alone applies);
    /// a driver before `0.3.0` declares no profile.
    pub(crate) async fn describe(
        &mut self,
    ) -> Result<Result<crate::descriptor::Descriptor, String>, Error> {
        let _ticking = self.before_call("describe")?;
        let r = match &self.world {
            World::V0_3(w) => w
                .adaptor_driver_driver()
                .call_describe(&mut self.store)
                .await
                .map(|info| convert::DriverInfo::V0_3(info, None)),
            World::V0_2(w) => w
                .adaptor_driver_driver()
                .call_describe(&mut self.store)
                .await
                .map(convert::DriverInfo::V0_2),
            World::V0_1(w) => w
                .adaptor_driver_driver()
                .call_describe(&mut self.store)
                .await
                .map(convert::DriverInfo::V0_1),
        };
        let mut info = self.after_call("describe", r)?;
        if let convert::DriverInfo::V0_3(_, profile) = &mut info {
            let _ticking = self.before_call("profile")?;
            let r = match &self.world {
                World::V0_3(w) => {
                    w.adaptor_driver_driver()
                        .call_profile(&mut self.store)
                        .await
                }
                World::V0_2(_) | World::V0_1(_) => Ok(None),
            };
            *profile = self.after_call("profile", r)?;
        }
        Ok(convert::descriptor(info))
    }

    pub(crate) async fn validate_config(
        &mut self,
        config: &str,
    ) -> Result<Result<(), ConfigRejection>, Error> {
        let r = driver_call!(self, "validate-config", call_validate_config, config)?;
        Ok(r.map_err(convert::config_rejection))
    }

    pub(crate) async fn config_fingerprint(
        &mut self,
        config: &str,
    ) -> Result<Result<String, ConfigRejection>, Error> {
        let r = driver_call!(self, "config-fingerprint", call_config_fingerprint, config)?;
        Ok(r.map_err(convert::config_rejection))
    }

    pub(crate) async fn environment_probes(
        &mut self,
        config: &str,
    ) -> Result<Result<Vec<Probe>, ConfigRejection>, Error> {
        let r = driver_call!(self, "environment-probes", call_environment_probes, config)?;
        Ok(r.map(convert::probes).map_err(convert::config_rejection))
    }

    /// The driver's checks over the probes' outputs, and the CLI version it read.
    pub(crate) async fn check_environment(
        &mut self,
        config: &str,
        outputs: &[ProbeOutput],
    ) -> Result<(Vec<crate::session::Check>, Option<String>), Error> {
        let outputs: Vec<wit::ProbeOutput> = outputs.iter().map(convert::probe_output).collect();
        let report = driver_call!(
            self,
            "check-environment",
            call_check_environment,
            config,
            &outputs
        )?;
        Ok(convert::environment(report))
    }

    /// Create a session resource.
    pub(crate) async fn open_session(
        mut self,
        request: &DriverRequest,
    ) -> Result<GuestSession, Error> {
        let (turn, resources) = (&request.0, &request.1);
        let _ticking = self.before_call("session.constructor")?;
        let r = match &self.world {
            World::V0_3(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_constructor(&mut self.store, turn, resources)
                    .await
            }
            World::V0_2(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_constructor(&mut self.store, turn)
                    .await
            }
            World::V0_1(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_constructor(&mut self.store, &turn.request)
                    .await
            }
        };
        let handle = self.after_call("session.constructor", r)?;
        Ok(GuestSession {
            instance: self,
            handle,
        })
    }
}

/// The limit a trap stands for, if any (`by_run`: the call's fuel was what was left of the
/// per-turn budget).
fn limit_of(e: &wasmtime::Error, limits: GuestLimits, by_run: bool) -> Option<Limit> {
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::OutOfFuel if by_run => Some(Limit::CpuPerRun {
                fuel: limits.run_fuel,
            }),
            wasmtime::Trap::OutOfFuel => Some(Limit::CpuPerCall {
                fuel: limits.call_fuel,
            }),
            wasmtime::Trap::Interrupt => Some(Limit::WallPerCall {
                ms: limits.call_wall.as_millis() as u64,
            }),
            wasmtime::Trap::StackOverflow => Some(Limit::Stack),
            _ => None,
        };
    }
    let text = format!("{e:#}");
    if text.contains("fuel allocated for hostcalls has been exhausted") {
        return Some(Limit::HostcallBytes {
            bytes: limits.hostcall_bytes,
        });
    }
    (text.contains("memory") && text.contains("grow")).then_some(Limit::Memory {
        bytes: limits.memory_bytes,
    })
}

fn describe_trap(e: &wasmtime::Error, limits: GuestLimits) -> String {
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::OutOfFuel => format!(
                "exceeded its CPU budget of {} fuel per call",
                limits.call_fuel
            ),
            wasmtime::Trap::Interrupt => format!(
                "exceeded its wall-clock bound of {} ms per call",
                limits.call_wall.as_millis()
            ),
            wasmtime::Trap::StackOverflow => "overflowed its stack".to_owned(),
            wasmtime::Trap::UnreachableCodeReached => {
                "panicked (unreachable code reached)".to_owned()
            }
            other => format!("trapped: {other}"),
        };
    }
    let text = format!("{e:#}");
    if text.contains("memory") && text.contains("grow") {
        format!(
            "exceeded its memory limit of {} MiB ({text})",
            limits.memory_bytes >> 20
        )
    } else {
        text
    }
}

/// A live `session` resource and the instance that owns it.
pub(crate) struct GuestSession {
    instance: GuestInstance,
    handle: ResourceAny,
}

impl GuestSession {
    /// Interrupt this session's long calls once `interrupt` is due (`None`: never).
    pub(crate) fn interrupt_on(&mut self, interrupt: Option<Interrupt>) {
        self.instance.interrupt_on(interrupt);
    }

    /// Whether the last call was interrupted by the run's cancellation (the instance is
    /// poisoned then: the turn has no outcome from the driver).
    pub(crate) fn was_interrupted(&self) -> bool {
        self.instance.store.data().interrupted
    }
}

macro_rules! session_call {
    ($self:ident, $name:literal, $method:ident $(, $arg:expr)*) => {{
        let _ticking = $self.instance.before_call($name)?;
        let inst = &mut $self.instance;
        let r = match &inst.world {
            World::V0_3(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .$method(&mut inst.store, $self.handle $(, $arg)*)
                    .await
            }
            World::V0_2(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .$method(&mut inst.store, $self.handle $(, $arg)*)
                    .await
            }
            World::V0_1(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .$method(&mut inst.store, $self.handle $(, $arg)*)
                    .await
            }
        };
        inst.after_call($name, r)
    }};
}

/// A session call that returns actions, checked against the per-call action limit.
macro_rules! session_actions {
    ($self:ident, $name:literal, $method:ident $(, $arg:expr)*) => {{
        let actions = session_call!($self, $name, $method $(, $arg)*)?;
        $self.host_actions($name, actions)
    }};
}

impl GuestSession {
    /// A call's actions, checked against the per-call action limit and in host types.
    fn host_actions(
        &mut self,
        call: &'static str,
        actions: Vec<wit::Action>,
    ) -> Result<Vec<Action>, Error> {
        let actions = self.instance.check_actions(call, actions)?;
        convert::actions(&self.instance.driver, actions)
    }

    /// `session.start`: the launch, or the driver's refusal as [`Error::StartRefused`].
    pub(crate) async fn start(&mut self) -> Result<Launch, Error> {
        match session_call!(self, "session.start", call_start)? {
            Ok(launch) => Ok(convert::launch(launch)),
            Err(e) => {
                let (kind, message) = convert::start_error(e);
                Err(Error::StartRefused {
                    driver: self.instance.driver.to_string(),
                    kind,
                    message,
                })
            }
        }
    }

    pub(crate) async fn on_stdout(&mut self, chunk: &[u8]) -> Result<Vec<Action>, Error> {
        session_actions!(self, "session.on-stdout", call_on_stdout, chunk)
    }

    pub(crate) async fn on_stderr(&mut self, chunk: &[u8]) -> Result<Vec<Action>, Error> {
        session_actions!(self, "session.on-stderr", call_on_stderr, chunk)
    }

    pub(crate) async fn on_decision(
        &mut self,
        id: &str,
        decision: &Decision,
    ) -> Result<Vec<Action>, Error> {
        let decision = convert::decision(decision);
        session_actions!(self, "session.on-decision", call_on_decision, id, &decision)
    }

    pub(crate) async fn on_timer(&mut self, id: u64) -> Result<Vec<Action>, Error> {
        session_actions!(self, "session.on-timer", call_on_timer, id)
    }

    pub(crate) async fn on_cancel(&mut self) -> Result<Vec<Action>, Error> {
        session_actions!(self, "session.on-cancel", call_on_cancel)
    }

    pub(crate) async fn on_exit(&mut self, status: SessionExit) -> Result<Vec<Action>, Error> {
        let status = convert::exit_status(status);
        session_actions!(self, "session.on-exit", call_on_exit, status)
    }

    /// `session.finish`, validated; the checkpoint is stamped with the driver's `codec`.
    pub(crate) async fn finish(&mut self, codec: &str) -> Result<DriverOutcome, Error> {
        let outcome = session_call!(self, "session.finish", call_finish)?;
        convert::outcome(&self.instance.driver, codec, outcome)
    }

    /// Another turn on a resident process (`Ok(Err(refusal))` when the driver refuses it).
    /// The per-turn CPU budget starts again: it bounds a turn, not the life of the process.
    pub(crate) async fn next_turn(
        &mut self,
        request: &DriverRequest,
    ) -> Result<Result<Vec<Action>, (StartRefusal, String)>, Error> {
        self.instance.fuel_used = 0;
        let turn = &request.0;
        let _ticking = self.instance.before_call("session.next-turn")?;
        let inst = &mut self.instance;
        let r = match &inst.world {
            World::V0_3(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_next_turn(&mut inst.store, self.handle, turn)
                    .await
            }
            World::V0_2(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_next_turn(&mut inst.store, self.handle, turn)
                    .await
            }
            World::V0_1(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_next_turn(&mut inst.store, self.handle, &turn.request)
                    .await
            }
        };
        match inst.after_call("session.next-turn", r)? {
            Ok(actions) => Ok(Ok(self.host_actions("session.next-turn", actions)?)),
            Err(e) => Ok(Err(convert::start_error(e))),
        }
    }

    /// `session.on-input`: the caller's input for the running turn; `Ok(Err(refusal))` when
    /// the driver refuses it. A `0.1.0` driver declares no steering, so the host never asks
    /// it (refused here all the same).
    pub(crate) async fn on_input(
        &mut self,
        text: &str,
    ) -> Result<Result<Vec<Action>, (crate::error::InputRefusal, String)>, Error> {
        let _ticking = self.instance.before_call("session.on-input")?;
        let inst = &mut self.instance;
        let r = match &inst.world {
            World::V0_3(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_on_input(&mut inst.store, self.handle, text)
                    .await
            }
            World::V0_2(w) => {
                w.adaptor_driver_driver()
                    .session()
                    .call_on_input(&mut inst.store, self.handle, text)
                    .await
            }
            World::V0_1(_) => Ok(Err(wit_session::InputError::Unsupported(
                "the driver was built against adaptor:driver@0.1.0, which has no on-input".into(),
            ))),
        };
        match inst.after_call("session.on-input", r)? {
            Ok(actions) => Ok(Ok(self.host_actions("session.on-input", actions)?)),
            Err(e) => Ok(Err(convert::input_error(e))),
        }
    }
}
