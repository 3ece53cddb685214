//! The kill loop's driver: starts the worker processes on one PostgreSQL
//! database, feeds them runs, and meanwhile kills them (SIGKILL, at random
//! moments, each restarted), crashes the server (`pg_ctl stop -m
//! immediate`, then starts it again), cuts connections
//! (`pg_terminate_backend`) and has the server refuse writes (a trigger
//! that fails a few of the writes to runs and to the ledger,
//! [`KillConfig::refusals_per_mille`]);
//! then lets every run end with no faults, and checks the world against the
//! books ([`super::check`]).
//!
//! The schedule of faults is drawn from a seed, but the processes and the
//! server keep real time, so a seed does not replay exactly: a failure
//! prints its seed and its command all the same, and the violations name
//! the runs and keys involved.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actum::books::{CreateRun, RunId, RunState, digest_of};
use actum::engine::{Engine, EngineOptions};
use actum::planted::PlantedBug;

use super::check::{Checked, check};
use super::worker::{AGENT, EXIT_FAILED};
use super::world::World;
use crate::rng::Rng;

/// What one kill loop does.
#[derive(Clone, Debug)]
pub struct KillConfig {
    /// The fault schedule's seed.
    pub seed: u64,
    /// Worker processes at a time.
    pub processes: usize,
    /// Worker threads in each.
    pub threads: usize,
    /// Process kills to make.
    pub kills: u64,
    /// Server crashes to make.
    pub crashes: u64,
    /// Lease of a run, ms.
    pub lease_ms: u64,
    /// A planted bug of the backend's, if any.
    pub planted: Option<PlantedBug>,
    /// Of every thousand writes to the runs' and the ledger's tables, how
    /// many the server refuses while the faults last (a trigger raises an error, as a full
    /// disk or a timeout would): the command's transaction fails whole, the
    /// statements after the refused one in its pipeline with it.
    pub refusals_per_mille: u64,
    /// Every how many commands a worker runs optimistically (decided on a
    /// read, written by a guarded statement) one waits half a lease between
    /// its read and its write (0: none), so the run's lease keeper renews
    /// in between and the write's guard must refuse it.
    pub stall_every: u64,
}

impl KillConfig {
    /// The quick mode CI runs: 300 kills and 20 server crashes.
    pub fn quick(seed: u64) -> KillConfig {
        KillConfig {
            seed,
            processes: 3,
            threads: 3,
            kills: 300,
            crashes: 20,
            lease_ms: 1_000,
            planted: None,
            refusals_per_mille: 20,
            stall_every: 5,
        }
    }

    /// The long mode (docs/POSTGRES.md): ten times the quick mode.
    pub fn long(seed: u64) -> KillConfig {
        KillConfig {
            kills: 3_000,
            crashes: 200,
            ..KillConfig::quick(seed)
        }
    }
}

/// What a kill loop did and found.
#[derive(Clone, Debug, Default)]
pub struct KillReport {
    /// Worker processes killed with SIGKILL (each started again).
    pub kills: u64,
    /// Server crashes (`pg_ctl stop -m immediate`, then a start).
    pub crashes: u64,
    /// Connections cut with `pg_terminate_backend`.
    pub cuts: u64,
    /// Writes the server refused (its log's count of the trigger's errors).
    pub refusals: u64,
    /// Worker processes that exited on their own (the server was down when
    /// they started, say) and were started again.
    pub exits: u64,
    /// Worker processes that stopped for a reason not the server's or the
    /// network's, with what they said: each a violation.
    pub failed_workers: Vec<String>,
    /// Runs created.
    pub runs: u64,
    /// What the check found, violations first.
    pub checked: Checked,
    /// The world's directory, when the loop kept it (a violation was found,
    /// or `ACTUM_PG_KILL_KEEP` is set): whoever expected the violation (a
    /// planted bug's test) removes it.
    pub kept: Option<PathBuf>,
}

impl std::fmt::Display for KillReport {
    /// One line of what the loop did and found, the violations after it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} process kills, {} server crashes, {} connection cuts, {} refused writes, {} worker \
             exits; {} runs ended {:?}; {} acts, {} charges retried after a query; {} violations",
            self.kills,
            self.crashes,
            self.cuts,
            self.refusals,
            self.exits,
            self.runs,
            self.checked.ended,
            self.checked.acts,
            self.checked.charge_retries,
            self.checked.violations.len()
        )?;
        for violation in &self.checked.violations {
            write!(f, "\n  violation: {violation}")?;
        }
        Ok(())
    }
}

/// The error the kill loop's trigger refuses a write with.
const REFUSAL: &str = "the kill loop refuses this write";

/// Where the server is, as scripts/postgres.sh exports it.
struct Server {
    url: String,
    bin: PathBuf,
    data: PathBuf,
    port: String,
    as_owner: bool,
}

impl Server {
    fn from_env() -> Result<Server, String> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| {
                format!("{name} is not set: run under scripts/postgres.sh, which starts a server")
            })
        };
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| format!("id -u: {e}"))?;
        Ok(Server {
            url: var("ACTUM_PG_URL")?,
            bin: PathBuf::from(var("ACTUM_PG_BIN")?),
            data: PathBuf::from(var("ACTUM_PG_DATA")?),
            port: var("ACTUM_PG_PORT")?,
            as_owner: String::from_utf8_lossy(&uid.stdout).trim() == "0",
        })
    }

    fn pg_ctl(&self) -> Command {
        let pg_ctl = self.bin.join("pg_ctl");
        if self.as_owner {
            let mut command = Command::new("setpriv");
            command
                .args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                ])
                .arg(pg_ctl);
            command
        } else {
            Command::new(pg_ctl)
        }
    }

    /// Crashes the server: every backend dies at once, nothing is flushed
    /// that was not already.
    fn crash(&self) -> Result<(), String> {
        let status = self
            .pg_ctl()
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl stop: {e}"))?;
        if !status.success() {
            return Err(format!("pg_ctl stop -m immediate: {status}"));
        }
        Ok(())
    }

    /// The directory scripts/postgres.sh made for the server: its socket
    /// and its log (`server.log`) are there.
    fn home(&self) -> &Path {
        self.data.parent().unwrap_or(Path::new("/tmp"))
    }

    /// Starts the server again (it recovers from its WAL), waiting until
    /// it accepts connections.
    fn start(&self) -> Result<(), String> {
        let dir = self.home();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            dir.display()
        );
        let status = self
            .pg_ctl()
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "120", "-o", &options, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if !status.success() {
            return Err(format!("pg_ctl start: {status}"));
        }
        Ok(())
    }

    /// Has the server refuse `per_mille` of every thousand writes to the
    /// runs' and the ledger's tables of the database `url` names (each
    /// refusal an error in the server's log, [`REFUSAL`]). `per_mille` 0
    /// takes the trigger away.
    fn refuse_writes(url: &str, per_mille: u64) -> Result<(), String> {
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| format!("connect to set the refusals: {e}"))?;
        let sql = if per_mille == 0 {
            "DROP TRIGGER IF EXISTS actum_kill_refuse ON actum_effects;
             DROP TRIGGER IF EXISTS actum_kill_refuse ON actum_runs"
                .to_string()
        } else {
            format!(
                "CREATE OR REPLACE FUNCTION actum_kill_refuse() RETURNS trigger
                 LANGUAGE plpgsql AS $$
                 BEGIN
                     IF random() * 1000 < {per_mille} THEN
                         RAISE EXCEPTION '{REFUSAL}';
                     END IF;
                     RETURN NEW;
                 END $$;
                 DROP TRIGGER IF EXISTS actum_kill_refuse ON actum_effects;
                 CREATE TRIGGER actum_kill_refuse BEFORE INSERT OR UPDATE ON actum_effects
                     FOR EACH ROW EXECUTE FUNCTION actum_kill_refuse();
                 DROP TRIGGER IF EXISTS actum_kill_refuse ON actum_runs;
                 CREATE TRIGGER actum_kill_refuse BEFORE INSERT OR UPDATE ON actum_runs
                     FOR EACH ROW EXECUTE FUNCTION actum_kill_refuse();"
            )
        };
        client
            .batch_execute(&sql)
            .map_err(|e| format!("set the refusals: {e}"))
    }

    /// How many refusals of [`Server::refuse_writes`] the server's log
    /// holds (every test on this server counted: take the difference). A
    /// count kept in the database would not do: a sequence jumps ahead at
    /// every crash recovery, and a row goes with the refused transaction.
    fn refusals_logged(&self) -> u64 {
        let log = self.home().join("server.log");
        let needle = format!("ERROR:  {REFUSAL}");
        std::fs::read_to_string(log).map_or(0, |text| {
            text.lines().filter(|l| l.contains(&needle)).count() as u64
        })
    }

    /// Cuts every connection to `database` but the caller's; how many.
    fn cut(&self, database: &str) -> u64 {
        let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) else {
            return 0;
        };
        client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&database],
            )
            .map_or(0, |rows| rows.len() as u64)
    }
}

/// A slot of the worker processes: its process and how many it started.
struct Slot {
    child: Option<Child>,
    generation: u64,
}

/// Runs the kill loop `config` describes with `worker_exe` as the worker
/// process (it is started as `worker_exe worker ...`), printing progress
/// on stderr.
pub fn drive(config: &KillConfig, worker_exe: &Path) -> Result<KillReport, String> {
    let server = Server::from_env()?;
    let url = actum::pg::scratch_database(&server.url, "actum_kill")
        .map_err(|e| format!("make the loop's database: {e}"))?;
    let database = url
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    let world_dir = std::env::temp_dir().join(format!("actum-kill-{}", database));
    let _ = std::fs::remove_dir_all(&world_dir);
    let world = World::new(&world_dir).map_err(|e| format!("the world: {e}"))?;
    // (The driver stands for the process that starts runs, a web server
    // say: it runs the same build as the workers, planted bug and all.)
    let mut options = EngineOptions::default();
    options.db.wal.planted_bug = config.planted;
    let engine = Engine::open_postgres(&url, options)
        .map_err(|e| format!("open the loop's database: {e}"))?;
    let refusals_before = server.refusals_logged();
    if config.refusals_per_mille > 0 {
        Server::refuse_writes(&url, config.refusals_per_mille)?;
    }
    let mut rng = Rng::new(config.seed);
    let mut report = KillReport::default();
    let spawn = |slot: usize, generation: u64| -> Result<Child, String> {
        let mut command = Command::new(worker_exe);
        command
            .arg("worker")
            .args(["--url", &url])
            .arg("--world")
            .arg(&world_dir)
            .args(["--name", &format!("p{slot}g{generation}")])
            .args(["--threads", &config.threads.to_string()])
            .args(["--lease-ms", &config.lease_ms.to_string()])
            .args(["--stall-every", &config.stall_every.to_string()])
            .stdout(Stdio::null());
        // What a worker says before it dies, for whoever reads a failure.
        let said = std::fs::File::create(world_dir.join(format!("p{slot}g{generation}.err")));
        command.stderr(said.map_or_else(|_| Stdio::null(), Stdio::from));
        if let Some(bug) = config.planted {
            command.args(["--planted", bug.name()]);
        }
        command
            .spawn()
            .map_err(|e| format!("start {}: {e}", worker_exe.display()))
    };
    let mut slots: Vec<Slot> = (0..config.processes)
        .map(|slot| {
            spawn(slot, 0).map(|child| Slot {
                child: Some(child),
                generation: 0,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut created: u64 = 0;
    let started = Instant::now();
    // A crash every so many kills, so both quotas end together.
    let kills_per_crash = (config.kills / config.crashes.max(1)).max(1);
    while report.kills < config.kills || report.crashes < config.crashes {
        // Keep work flowing: a few new runs each round.
        for _ in 0..3 {
            let run = format!("run-{created:05}");
            let input = format!("{} EUR", 1 + rng.below(500));
            let made = engine.create_run(CreateRun {
                run: RunId::new(&run).map_err(|e| e.to_string())?,
                input_digest: digest_of(input.as_bytes()),
                agent_version: actum::runtime::agent_name(AGENT.0, AGENT.1),
                trace_id: run.clone(),
                parent: None,
                input: Some(input.into_bytes()),
            });
            // (The server may be down: the run is made next round.)
            if made.is_ok() {
                created += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10 + rng.below(120)));
        respawn_exited(&world_dir, &mut slots, &spawn, &mut report)?;
        if report.kills < config.kills {
            let slot = rng.below(slots.len() as u64) as usize;
            kill(&mut slots[slot]);
            slots[slot].generation += 1;
            slots[slot].child = Some(spawn(slot, slots[slot].generation)?);
            report.kills += 1;
        }
        if rng.below(8) == 0 {
            report.cuts += server.cut(&database);
        }
        let crash_due =
            report.kills >= kills_per_crash * (report.crashes + 1) || report.kills >= config.kills;
        if report.crashes < config.crashes && crash_due {
            server.crash()?;
            std::thread::sleep(Duration::from_millis(rng.below(300)));
            server.start()?;
            report.crashes += 1;
        }
        if report.kills % 50 == 0 {
            eprintln!(
                "pg-kill: {} kills, {} server crashes, {} cuts, {created} runs, {} s",
                report.kills,
                report.crashes,
                report.cuts,
                started.elapsed().as_secs()
            );
        }
    }
    report.runs = created;
    // The faults stop: every run must end. The trigger goes first (the
    // last round's crash started the server again just now: a few tries).
    if config.refusals_per_mille > 0 {
        let mut dropped = Server::refuse_writes(&url, 0);
        for _ in 0..20 {
            if dropped.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            dropped = Server::refuse_writes(&url, 0);
        }
        dropped?;
        report.refusals = server.refusals_logged().saturating_sub(refusals_before);
    }
    let ended = quiesce(
        &engine,
        &world_dir,
        &mut slots,
        &spawn,
        &mut report,
        created,
    );
    for slot in &mut slots {
        kill(slot);
    }
    report.checked = check(&engine, &world, created)?;
    if let Err(stuck) = ended {
        report.checked.violations.push(stuck);
    }
    let failed = std::mem::take(&mut report.failed_workers);
    report.checked.violations.extend(failed);
    if report.checked.violations.is_empty() {
        if std::env::var_os("ACTUM_PG_KILL_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&world_dir);
        } else {
            report.kept = Some(world_dir.clone());
        }
    } else {
        report.kept = Some(world_dir.clone());
        report.checked.violations.push(format!(
            "(the world's files and what each worker said are kept in {})",
            world_dir.display()
        ));
    }
    Ok(report)
}

/// Kills the slot's process (SIGKILL) and reaps it.
fn kill(slot: &mut Slot) {
    if let Some(mut child) = slot.child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Starts again every worker process that exited on its own.
fn respawn_exited(
    world_dir: &Path,
    slots: &mut [Slot],
    spawn: &dyn Fn(usize, u64) -> Result<Child, String>,
    report: &mut KillReport,
) -> Result<(), String> {
    for (n, slot) in slots.iter_mut().enumerate() {
        let status = match slot.child.as_mut() {
            None => None,
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status),
                _ => continue,
            },
        };
        if status.and_then(|s| s.code()) == Some(i32::from(EXIT_FAILED)) {
            let said =
                std::fs::read_to_string(world_dir.join(format!("p{n}g{}.err", slot.generation)))
                    .unwrap_or_default();
            report.failed_workers.push(format!(
                "worker p{n}g{} stopped: {}",
                slot.generation,
                said.trim()
            ));
        }
        {
            slot.generation += 1;
            slot.child = Some(spawn(n, slot.generation)?);
            report.exits += 1;
        }
    }
    Ok(())
}

/// Waits, with no faults, until every run ended; `Err` names the runs
/// still going after the deadline.
fn quiesce(
    engine: &Engine,
    world_dir: &Path,
    slots: &mut [Slot],
    spawn: &dyn Fn(usize, u64) -> Result<Child, String>,
    report: &mut KillReport,
    created: u64,
) -> Result<(), String> {
    const DEADLINE: Duration = Duration::from_secs(180);
    let start = Instant::now();
    loop {
        let _ = respawn_exited(world_dir, slots, spawn, report);
        let mut going = Vec::new();
        let mut after: Option<RunId> = None;
        let mut listed = true;
        loop {
            let Ok(page) = engine.runs(None, after.as_ref(), 1_000) else {
                // (A connection the last crash broke: read again.)
                listed = false;
                break;
            };
            going.extend(
                page.iter()
                    .filter(|r| !r.state.is_terminal())
                    .map(|r| (r.id.to_string(), r.state)),
            );
            after = page.last().map(|r| r.id.clone());
            if page.len() < 1_000 {
                break;
            }
        }
        if listed && going.is_empty() {
            return Ok(());
        }
        if start.elapsed() > DEADLINE {
            let shown: Vec<String> = going
                .iter()
                .take(10)
                .map(|(run, state)| format!("{run} ({})", state_name(*state)))
                .collect();
            return Err(format!(
                "{} of {created} runs did not end within {} s of the last fault: {}",
                going.len(),
                DEADLINE.as_secs(),
                shown.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn state_name(state: RunState) -> String {
    format!("{state:?}").to_lowercase()
}
