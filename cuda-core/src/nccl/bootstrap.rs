//! [`Bootstrap`]: forming a communicator from what cluster launchers set (`torchrun`, Slurm,
//! Open MPI) or from an explicit address, with the unique id exchanged over TCP.

#![forbid(unsafe_code)]

use super::comm::Communicator;
use super::config::Config;
use super::id::UniqueId;
use super::rendezvous::{self, Hello, Join, Serve};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use std::time::Duration;

/// Which launcher's variables a [`Bootstrap`] was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// `torchrun` (and anything that sets its variables): `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    /// `MASTER_ADDR`, `MASTER_PORT`.
    Torchrun,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`; the address from
    /// `MASTER_ADDR`/`MASTER_PORT`, or else the job's first node and a port derived from the job.
    Slurm,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`; the address from `MASTER_ADDR`/`MASTER_PORT`.
    OpenMpi,
    /// [`Bootstrap::new`]: numbers and address given by the program.
    Explicit,
}

/// How long each wait of a bootstrap lasts unless [`Bootstrap::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Where one rank of a job stands and how it meets the others: its rank, the rank count, its
/// local rank (which GPU of its host is its own), rank 0's address, a job name and a time
/// limit. It forms the communicator with [`communicator`](Self::communicator): rank 0 makes
/// the NCCL unique id and hands it over TCP to every other rank, then every rank joins the
/// clique, each wait bounded by the time limit.
///
/// ```no_run
/// use cuhost::nccl::{Bootstrap, Config};
/// use cuhost::Context;
/// use std::time::Duration;
/// # fn main() -> cuhost::Result<()> {
/// // Under torchrun, srun or mpirun (with MASTER_ADDR and MASTER_PORT set):
/// let boot = Bootstrap::from_env()?.timeout(Duration::from_secs(120));
/// let ctx = Context::primary(&boot.device()?)?;
/// let comm = boot.communicator(&ctx, &Config::new())?;
/// assert_eq!(comm.rank()?, boot.rank());
/// # Ok(()) }
/// ```
///
/// The exchange is the crate's own (the guide's NCCL chapter describes it): rank 0 listens on `MASTER_PORT` on every interface; a peer that is not a rank of this
/// job (another job's rank, another rank count, a rank number already taken, another protocol
/// version) is refused with a message, and a connection that does not speak the protocol is
/// closed. Sizes are fixed; every connect, read, write and accept has a deadline. No MPI is
/// needed.
///
/// # No authentication
///
/// The exchange proves nothing about who connects: anyone who can reach rank 0's port while it
/// waits can claim a free rank (and so keep the real rank out, or receive the unique id and
/// join the clique, whose traffic NCCL does not encrypt either), and the job name is a label
/// against mistakes, not a secret. Run it on a network that only the job's hosts reach (a
/// cluster's private network, or a firewall that admits only them), as for NCCL itself; on a
/// shared network, hand the id over a channel of your own that authenticates the ranks
/// ([`UniqueId::to_hex`] and [`Communicator::init_rank_within`]). Resolving rank 0's address
/// (DNS) is a call of the system that has no time limit of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bootstrap {
    rank: usize,
    ranks: usize,
    local_rank: usize,
    address: String,
    job: String,
    timeout: Duration,
    launcher: Launcher,
}

const FROM_ENV: &str = "Bootstrap::from_env";

fn number(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>> {
    let Some(text) = lookup(name) else { return Ok(None) };
    text.trim().parse().map(Some).map_err(|_| {
        Error::invalid(
            FROM_ENV,
            format!("{name} is {text:?}, not a whole number; the launcher sets it, or set it yourself"),
        )
    })
}

fn required(lookup: &dyn Fn(&str) -> Option<String>, name: &str, launcher: &str) -> Result<usize> {
    number(lookup, name)?.ok_or_else(|| {
        Error::invalid(
            FROM_ENV,
            format!("{launcher} variables are set but {name} is missing; set it to this process's value"),
        )
    })
}

/// `MASTER_ADDR:MASTER_PORT`, if both are set.
fn master(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>> {
    match (lookup("MASTER_ADDR"), lookup("MASTER_PORT")) {
        (Some(host), Some(port)) => {
            Ok(Some(join_host_port(host.trim(), &port_number("MASTER_PORT", &port)?)))
        }
        (None, None) => Ok(None),
        (Some(_), None) => {
            Err(Error::invalid(FROM_ENV, "MASTER_ADDR is set but MASTER_PORT is not; set both"))
        }
        (None, Some(_)) => {
            Err(Error::invalid(FROM_ENV, "MASTER_PORT is set but MASTER_ADDR is not; set both"))
        }
    }
}

fn port_number(name: &str, text: &str) -> Result<String> {
    match text.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p.to_string()),
        _ => Err(Error::invalid(FROM_ENV, format!("{name} is {text:?}, not a port number from 1 to 65535"))),
    }
}

/// `host:port`, with an IPv6 literal in brackets.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The first host of a Slurm host list: `node[03-04,07],gpu1` is `node03`.
pub(crate) fn first_host(list: &str) -> Option<String> {
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                // The first value of the range: up to `-`, `,` or `]`; then skip to `]`.
                let mut taken = false;
                for c in chars.by_ref() {
                    match c {
                        ']' => break,
                        '-' | ',' => taken = true,
                        c if !taken => host.push(c),
                        _ => {}
                    }
                }
            }
            c => host.push(c),
        }
    }
    (!host.is_empty()).then_some(host)
}

/// The address of rank 0 under Slurm without `MASTER_ADDR`: the step's first node and a port
/// of the job's own (20000 to 29999, from the job and step ids).
fn slurm_address(lookup: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let list = lookup("SLURM_STEP_NODELIST").or_else(|| lookup("SLURM_JOB_NODELIST"));
    let host = list.as_deref().and_then(first_host).ok_or_else(|| {
        Error::invalid(FROM_ENV, "under Slurm without MASTER_ADDR, SLURM_STEP_NODELIST or SLURM_JOB_NODELIST names rank 0's host; neither is set: set MASTER_ADDR and MASTER_PORT")
    })?;
    let port = match lookup("MASTER_PORT") {
        Some(p) => port_number("MASTER_PORT", &p)?,
        None => {
            let job = number(lookup, "SLURM_JOB_ID")?.ok_or_else(|| {
                Error::invalid(FROM_ENV, "under Slurm without MASTER_PORT the port is derived from SLURM_JOB_ID, which is not set: set MASTER_PORT")
            })?;
            let step = number(lookup, "SLURM_STEP_ID")?.unwrap_or(0);
            (20000 + (job.wrapping_mul(7).wrapping_add(step)) % 10000).to_string()
        }
    };
    Ok(join_host_port(&host, &port))
}

impl Bootstrap {
    /// A bootstrap with numbers and an address of the program's own: `rank` of `ranks`, on GPU
    /// `local_rank` of its host, meeting rank 0 at `address` (`host:port`; rank 0 listens on
    /// that port).
    ///
    /// `ranks` of 0, `rank` or `local_rank` not below it, or an address without a port is an
    /// [`Error::InvalidArgument`].
    pub fn new(rank: usize, ranks: usize, local_rank: usize, address: &str) -> Result<Bootstrap> {
        const OP: &str = "Bootstrap::new";
        if rank >= ranks {
            return Err(Error::invalid(OP, format!("rank {rank} is not below the rank count {ranks}")));
        }
        if local_rank >= ranks {
            return Err(Error::invalid(
                OP,
                format!("local rank {local_rank} is not below the rank count {ranks}"),
            ));
        }
        let port = address.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
        if !matches!(port, Some(Ok(p)) if p != 0) {
            return Err(Error::invalid(
                OP,
                format!("{address:?} is not host:port with a port from 1 to 65535"),
            ));
        }
        Ok(Bootstrap {
            rank,
            ranks,
            local_rank,
            address: address.to_string(),
            job: String::new(),
            timeout: DEFAULT_TIMEOUT,
            launcher: Launcher::Explicit,
        })
    }

    /// The bootstrap the launcher set in this process's environment: `torchrun`'s
    /// `RANK`/`WORLD_SIZE`/`LOCAL_RANK` with `MASTER_ADDR`/`MASTER_PORT`; else Slurm's
    /// `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID` (rank 0's address from
    /// `MASTER_ADDR`/`MASTER_PORT`, or else the step's first node and a port derived from
    /// `SLURM_JOB_ID`); else Open MPI's `OMPI_COMM_WORLD_*` with `MASTER_ADDR`/`MASTER_PORT`.
    /// The job name is `TORCHELASTIC_RUN_ID`, or Slurm's job and step ids, where set.
    ///
    /// None of these set, a variable that is not a number, a missing partner variable, or
    /// numbers out of range is an [`Error::InvalidArgument`] that names the variable to set.
    pub fn from_env() -> Result<Bootstrap> {
        Bootstrap::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) reading the variables through `lookup` (for a launcher
    /// that passes them otherwise, or a test). Fails as `from_env` does.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Bootstrap> {
        let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
        let (launcher, rank, ranks, local, address, job) = if lookup("RANK").is_some()
            || lookup("WORLD_SIZE").is_some()
        {
            let address = master(lookup)?.ok_or_else(|| {
                Error::invalid(FROM_ENV, "RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT are not; set them to rank 0's host and a free port")
            })?;
            (
                Launcher::Torchrun,
                required(lookup, "RANK", "torchrun")?,
                required(lookup, "WORLD_SIZE", "torchrun")?,
                required(lookup, "LOCAL_RANK", "torchrun")?,
                address,
                lookup("TORCHELASTIC_RUN_ID").unwrap_or_default(),
            )
        } else if lookup("SLURM_PROCID").is_some() {
            // Without MASTER_ADDR, rank 0 is on the step's first node, at MASTER_PORT if set.
            let address = match lookup("MASTER_ADDR") {
                Some(_) => master(lookup)?.unwrap_or_default(),
                None => slurm_address(lookup)?,
            };
            let job = match (lookup("SLURM_JOB_ID"), lookup("SLURM_STEP_ID")) {
                (Some(j), Some(s)) => format!("slurm-{j}.{s}"),
                (Some(j), None) => format!("slurm-{j}"),
                _ => String::new(),
            };
            (
                Launcher::Slurm,
                required(lookup, "SLURM_PROCID", "Slurm")?,
                required(lookup, "SLURM_NTASKS", "Slurm")?,
                required(lookup, "SLURM_LOCALID", "Slurm")?,
                address,
                job,
            )
        } else if lookup("OMPI_COMM_WORLD_RANK").is_some() {
            let address = master(lookup)?.ok_or_else(|| {
                Error::invalid(FROM_ENV, "under mpirun, set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port (mpirun -x MASTER_ADDR -x MASTER_PORT)")
            })?;
            (
                Launcher::OpenMpi,
                required(lookup, "OMPI_COMM_WORLD_RANK", "Open MPI")?,
                required(lookup, "OMPI_COMM_WORLD_SIZE", "Open MPI")?,
                required(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI")?,
                address,
                String::new(),
            )
        } else {
            return Err(Error::invalid(
                FROM_ENV,
                "no launcher variables are set: start under torchrun, srun or mpirun, or set RANK, WORLD_SIZE, \
                 LOCAL_RANK, MASTER_ADDR and MASTER_PORT, or use Bootstrap::new",
            ));
        };
        let mut b = Bootstrap::new(rank, ranks, local, &address).map_err(|e| match e {
            Error::InvalidArgument { message, .. } => Error::invalid(FROM_ENV, message),
            other => other,
        })?;
        b.launcher = launcher;
        b.job = job;
        Ok(b)
    }

    /// The same bootstrap, each of whose waits (for rank 0, for the other ranks, for NCCL to
    /// connect them) lasts at most `timeout` ([`DEFAULT_TIMEOUT`] unless set).
    pub fn timeout(mut self, timeout: Duration) -> Bootstrap {
        self.timeout = timeout;
        self
    }

    /// The same bootstrap with the job name `job`: ranks of different job names refuse each
    /// other, so that two jobs that share a host and a port cannot mix.
    pub fn job(mut self, job: &str) -> Bootstrap {
        self.job = job.to_string();
        self
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// This process's rank among those of its host: its GPU.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Rank 0's address, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The job name (empty when none was given or found).
    pub fn job_name(&self) -> &str {
        &self.job
    }

    /// The time limit of each wait.
    pub fn time_limit(&self) -> Duration {
        self.timeout
    }

    /// Whose variables it was read from.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// This rank's GPU: device `local_rank` of those this process sees; where the process sees
    /// exactly one (a launcher that gives each task its own `CUDA_VISIBLE_DEVICES`), that one.
    ///
    /// No device, or a local rank past the devices seen, is an [`Error::InvalidArgument`]
    /// saying to start fewer ranks per host or to set `CUDA_VISIBLE_DEVICES`.
    pub fn device(&self) -> Result<Device> {
        const OP: &str = "Bootstrap::device";
        let seen = Device::count()?;
        match seen {
            0 => Err(Error::invalid(
                OP,
                "this process sees no CUDA device; check CUDA_VISIBLE_DEVICES and the driver",
            )),
            1 => Device::get(0usize),
            n if self.local_rank < n => Device::get(self.local_rank),
            n => Err(Error::invalid(
                OP,
                format!(
                    "local rank {} but this process sees {n} GPUs; start at most {n} ranks per host, or give each \
                     rank its own GPU with CUDA_VISIBLE_DEVICES",
                    self.local_rank
                ),
            )),
        }
    }

    /// The clique's unique id: rank 0 makes it ([`UniqueId::new`]) and hands it to every other
    /// rank over TCP once all have connected; the other ranks connect to rank 0 (retrying while
    /// it starts) and receive it. Returns when every rank has it.
    ///
    /// Fails with an [`Error::Timeout`] when not every rank came within the time limit (on
    /// rank 0, which names the missing ranks and tells the others, and on the ranks that wait
    /// for it); with an [`Error::Rendezvous`] when a connection fails or rank 0 refuses this
    /// rank (another job, rank count or protocol version, or a rank number already taken),
    /// saying which; and on rank 0, with NCCL's error when it cannot make an id.
    pub fn unique_id(&self) -> Result<UniqueId> {
        const OP: &str = "Bootstrap::unique_id";
        let deadline = super::handle::deadline_after(self.timeout);
        let job = rendezvous::job_key(&self.job);
        if self.rank == 0 {
            // Listen before making the id, so that a port in use fails before NCCL starts.
            let listener = rendezvous::listen(OP, &self.address)?;
            let id = UniqueId::new()?;
            let serve = Serve { id: &id, ranks: self.ranks, job, deadline, timeout: self.timeout };
            rendezvous::serve(OP, &listener, &serve)?;
            return Ok(id);
        }
        let hello =
            Hello { version: rendezvous::VERSION, ranks: self.ranks as u64, rank: self.rank as u64, job };
        rendezvous::join(OP, &Join { address: &self.address, hello, deadline, timeout: self.timeout })
    }

    /// Forms this rank's communicator on the device of `ctx` (normally [`device`](Self::device)'s
    /// primary context): [`unique_id`](Self::unique_id), then
    /// [`Communicator::init_rank_within`] with the time limit. The communicator is
    /// non-blocking (see [`Config::blocking`]), so that every later wait can have a deadline
    /// too ([`Communicator::synchronize`]).
    ///
    /// Fails as `unique_id` and `init_rank_within` do: an [`Error::Timeout`] when a rank did
    /// not come in time, at either step.
    pub fn communicator(&self, ctx: &Context, config: &Config) -> Result<Communicator> {
        let id = self.unique_id()?;
        Communicator::init_rank_within(ctx, &id, self.ranks, self.rank, config, self.timeout)
    }
}
