//! The exchange of an NCCL unique id over TCP: rank 0 listens, every other rank connects,
//! introduces itself, and gets the id once all have come.
//!
//! The protocol is small and fixed-size, so that nothing a peer sends can make a rank allocate
//! or wait without bound:
//!
//! * A rank introduces itself with a [`Hello`] of [`HELLO_BYTES`]: the magic `CCNCCLRV`, the
//!   protocol version, the rank count, its rank and a key of its job.
//! * Rank 0 answers each with the magic, the version and a status: the id ([`UniqueId::BYTES`])
//!   when every rank has come, or a refusal or a time-out with a message of at most
//!   [`MAX_MESSAGE`] bytes.
//!
//! A connection that does not start with the magic (a port scanner, another program) is
//! closed and forgotten; a peer that speaks the protocol but belongs to another job, another
//! rank count or version, or names a rank already taken, is refused with a message saying so,
//! and rank 0 keeps waiting for the right one. Every read, write, connect and accept has a
//! deadline, and each message must arrive whole by it (a peer that trickles its bytes gains
//! nothing): a connection has [`HELLO_WAIT`] to introduce itself, and a rank waits for the
//! answer until the rendezvous's deadline. Nothing is authenticated: whoever reaches the port can claim a free rank (see
//! [`Bootstrap`](super::Bootstrap)'s *No authentication*).

#![forbid(unsafe_code)]

use super::id::UniqueId;
use crate::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The first bytes of every message.
pub(crate) const MAGIC: [u8; 8] = *b"CCNCCLRV";
/// The protocol version this crate speaks.
pub(crate) const VERSION: u32 = 1;
/// The size of a [`Hello`].
pub(crate) const HELLO_BYTES: usize = 40;
/// The longest message of a refusal or time-out.
pub(crate) const MAX_MESSAGE: usize = 1024;
/// How long rank 0 waits for a connected peer to introduce itself, in all: rank 0 serves one
/// connection at a time, and a peer that trickles its bytes holds the others back that long.
const HELLO_WAIT: Duration = Duration::from_secs(1);
/// The pause between two connection attempts, and between two looks for a new connection.
const RETRY: Duration = Duration::from_millis(100);

/// The answer's status: the id follows.
const GRANTED: u32 = 0;
/// The answer's status: this peer was refused; a message follows.
const REFUSED: u32 = 1;
/// The answer's status: rank 0 gave up waiting for other ranks; a message follows.
const TIMED_OUT: u32 = 2;

/// What a rank tells rank 0 about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The protocol version it speaks.
    pub version: u32,
    /// The rank count it was started with.
    pub ranks: u64,
    /// Its rank.
    pub rank: u64,
    /// The key of its job ([`job_key`]).
    pub job: u64,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[16..24].copy_from_slice(&self.ranks.to_le_bytes());
        b[24..32].copy_from_slice(&self.rank.to_le_bytes());
        b[32..40].copy_from_slice(&self.job.to_le_bytes());
        b
    }

    /// The hello in `b`, or `None` when it does not start with the magic.
    pub(crate) fn decode(b: &[u8; HELLO_BYTES]) -> Option<Hello> {
        if b[..8] != MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Some(Hello { version: u32_at(8), ranks: u64_at(16), rank: u64_at(24), job: u64_at(32) })
    }
}

/// A 64-bit key of a job's name (FNV-1a), so that ranks of two jobs sharing a port refuse
/// each other.
pub(crate) fn job_key(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// What rank 0 serves and to whom.
pub(crate) struct Serve<'a> {
    /// The id every rank gets.
    pub id: &'a UniqueId,
    /// The rank count.
    pub ranks: usize,
    /// The job's key.
    pub job: u64,
    /// When to give up.
    pub deadline: Instant,
    /// The total wait, for the messages.
    pub timeout: Duration,
}

/// The time left before `deadline`, never zero (socket timeouts refuse zero).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
}

/// Reads exactly `buf.len()` bytes by `deadline`, however slowly the peer sends them: the
/// socket's time limit, which holds for one read only, is set to the time left before each.
/// Past the deadline this is an error of kind `TimedOut`.
pub(crate) fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        if Instant::now() >= deadline {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left(deadline)))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn io_error(operation: &'static str, what: String, e: std::io::Error) -> Error {
    Error::Rendezvous { operation, message: format!("{what}: {e}") }
}

/// Rank 0: waits on `listener` for every other rank, then sends each the id. A rank that has
/// not come by the deadline is an [`Error::Timeout`] naming the missing ranks, also sent to
/// the ranks that came.
pub(crate) fn serve(operation: &'static str, listener: &TcpListener, s: &Serve<'_>) -> Result<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| io_error(operation, "cannot poll the listening socket".into(), e))?;
    let mut peers: Vec<Option<TcpStream>> = (0..s.ranks).map(|_| None).collect();
    let mut joined = 1;
    while joined < s.ranks {
        if Instant::now() >= s.deadline {
            let missing: Vec<usize> = (1..s.ranks).filter(|&r| peers[r].is_none()).collect();
            let message = format!(
                "rank(s) {missing:?} of {} did not join within {:.1} s; check that every rank was \
                 started with the same address, rank count and job, and that this port is reachable",
                s.ranks,
                s.timeout.as_secs_f64()
            );
            for peer in peers.iter_mut().flatten() {
                let _ = answer(peer, TIMED_OUT, message.as_bytes());
            }
            return Err(Error::Timeout { operation, waited: s.timeout, message });
        }
        match listener.accept() {
            Ok((stream, from)) => {
                if admit(stream, from, s, &mut peers).is_some() {
                    joined += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(RETRY.min(left(s.deadline)));
            }
            Err(e) => return Err(io_error(operation, "accepting a rank's connection".into(), e)),
        }
    }
    let mut reply = Vec::with_capacity(UniqueId::BYTES);
    reply.extend_from_slice(s.id.as_bytes());
    for (rank, peer) in peers.iter_mut().enumerate() {
        if let Some(peer) = peer {
            answer(peer, GRANTED, &reply)
                .map_err(|e| io_error(operation, format!("sending the id to rank {rank}"), e))?;
        }
    }
    Ok(())
}

/// Reads a connected peer's hello and keeps it in its rank's slot; refuses (with a message)
/// or drops a peer that does not belong. Returns the rank admitted.
fn admit(
    mut stream: TcpStream,
    from: SocketAddr,
    s: &Serve<'_>,
    peers: &mut [Option<TcpStream>],
) -> Option<usize> {
    stream.set_nonblocking(false).ok()?;
    // The whole hello within HELLO_WAIT (and the rendezvous's deadline), however it trickles.
    let hello_by = Instant::now().checked_add(HELLO_WAIT).map_or(s.deadline, |d| d.min(s.deadline));
    stream.set_write_timeout(Some(left(hello_by))).ok()?;
    let _ = stream.set_nodelay(true);
    let mut b = [0u8; HELLO_BYTES];
    read_by(&mut stream, &mut b, hello_by).ok()?;
    // Not this protocol: close it without a word.
    let hello = Hello::decode(&b)?;
    let refusal = refusal(&hello, s, peers);
    if let Some(message) = refusal {
        let _ = answer(&mut stream, REFUSED, format!("rank 0 refused {from}: {message}").as_bytes());
        return None;
    }
    let rank = usize::try_from(hello.rank).ok()?;
    // The answer may be sent long after: give the writes the whole deadline.
    stream.set_write_timeout(Some(left(s.deadline).max(HELLO_WAIT))).ok()?;
    *peers.get_mut(rank)? = Some(stream);
    Some(rank)
}

/// Why rank 0 refuses `hello`, if it does.
pub(crate) fn refusal(hello: &Hello, s: &Serve<'_>, peers: &[Option<TcpStream>]) -> Option<String> {
    if hello.version != VERSION {
        return Some(format!(
            "it speaks rendezvous protocol version {}, rank 0 speaks {VERSION}; use the same cuda-core on every rank",
            hello.version
        ));
    }
    if hello.job != s.job {
        return Some(
            "it belongs to another job (its job key differs); give each job its own port, or the same job name to all its ranks"
                .into(),
        );
    }
    if hello.ranks != s.ranks as u64 {
        return Some(format!(
            "it was started for {} ranks, rank 0 for {}; start every rank with the same rank count",
            hello.ranks, s.ranks
        ));
    }
    match usize::try_from(hello.rank) {
        Ok(0) => Some("it claims rank 0, which is the rank that serves the id; give it another rank".into()),
        Ok(r) if r < s.ranks && peers.get(r).is_some_and(Option::is_some) => {
            Some(format!("rank {r} has already joined; every rank needs its own number"))
        }
        Ok(r) if r < s.ranks => None,
        _ => Some(format!("rank {} is not below the rank count {}", hello.rank, s.ranks)),
    }
}

/// Writes an answer: magic, version, status, then the id or a length-prefixed message.
fn answer(stream: &mut TcpStream, status: u32, body: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(16 + body.len() + 4);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    if status == GRANTED {
        out.extend_from_slice(body);
    } else {
        let body = &body[..body.len().min(MAX_MESSAGE)];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
    }
    stream.write_all(&out)?;
    stream.flush()
}

/// What a rank other than 0 sends and expects.
pub(crate) struct Join<'a> {
    /// Rank 0's address, `host:port`.
    pub address: &'a str,
    /// Who this rank is.
    pub hello: Hello,
    /// When to give up.
    pub deadline: Instant,
    /// The total wait, for the messages.
    pub timeout: Duration,
}

/// A rank other than 0: connects to rank 0 (retrying while it starts), introduces itself and
/// reads the id. Rank 0 not answering by the deadline, or giving up itself, is an
/// [`Error::Timeout`]; a refusal or a broken answer is an [`Error::Rendezvous`].
pub(crate) fn join(operation: &'static str, j: &Join<'_>) -> Result<UniqueId> {
    let mut stream = connect(operation, j)?;
    let io = |what: &str, e: std::io::Error| {
        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            Error::Timeout {
                operation,
                waited: j.timeout,
                message: format!(
                    "rank 0 at {} did not hand out the id in time ({what}); are all {} ranks started?",
                    j.address, j.hello.ranks
                ),
            }
        } else {
            io_error(operation, format!("{what} rank 0 at {}", j.address), e)
        }
    };
    stream.set_write_timeout(Some(left(j.deadline))).map_err(|e| io("setting up", e))?;
    stream.write_all(&j.hello.encode()).map_err(|e| io("introducing itself to", e))?;
    let mut head = [0u8; 16];
    read_by(&mut stream, &mut head, j.deadline).map_err(|e| io("reading the answer of", e))?;
    if head[..8] != MAGIC {
        return Err(Error::Rendezvous {
            operation,
            message: format!(
                "{} answered, but not as a cuda-core rank 0 does; check MASTER_ADDR and MASTER_PORT",
                j.address
            ),
        });
    }
    let status = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
    if status == GRANTED {
        let mut id = [0u8; UniqueId::BYTES];
        read_by(&mut stream, &mut id, j.deadline).map_err(|e| io("reading the id from", e))?;
        return UniqueId::from_bytes(&id);
    }
    let mut len = [0u8; 4];
    read_by(&mut stream, &mut len, j.deadline).map_err(|e| io("reading the answer of", e))?;
    let len = (u32::from_le_bytes(len) as usize).min(MAX_MESSAGE);
    let mut text = vec![0u8; len];
    read_by(&mut stream, &mut text, j.deadline).map_err(|e| io("reading the answer of", e))?;
    let message = String::from_utf8_lossy(&text).into_owned();
    if status == TIMED_OUT {
        Err(Error::Timeout { operation, waited: j.timeout, message })
    } else {
        Err(Error::Rendezvous { operation, message })
    }
}

/// Connects to rank 0, retrying until the deadline (rank 0 may start later).
fn connect(operation: &'static str, j: &Join<'_>) -> Result<TcpStream> {
    let mut last = String::from("no attempt was made");
    loop {
        match resolve(operation, j.address) {
            Ok(addresses) => {
                for a in addresses {
                    match TcpStream::connect_timeout(&a, left(j.deadline).min(Duration::from_secs(5))) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(s);
                        }
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
            }
            // Names may resolve only once the other host is up: retry those too.
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= j.deadline {
            return Err(Error::Timeout {
                operation,
                waited: j.timeout,
                message: format!(
                    "rank 0 did not accept a connection at {} (last attempt: {last}); check that rank 0 \
                     runs and that MASTER_ADDR and MASTER_PORT name its host and a free port",
                    j.address
                ),
            });
        }
        std::thread::sleep(RETRY.min(left(j.deadline)));
    }
}

/// The socket addresses of `address` (`host:port`).
pub(crate) fn resolve(operation: &'static str, address: &str) -> Result<Vec<SocketAddr>> {
    let found: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| io_error(operation, format!("cannot resolve {address}"), e))?
        .collect();
    if found.is_empty() {
        return Err(Error::Rendezvous { operation, message: format!("{address} resolves to no address") });
    }
    Ok(found)
}

/// Rank 0's listening socket on the port of `address`, on every interface of the address's
/// family (rank 0's own name may resolve to an address only this host reaches, as Debian's
/// `127.0.1.1`).
pub(crate) fn listen(operation: &'static str, address: &str) -> Result<TcpListener> {
    let first = resolve(operation, address)?[0];
    let any: SocketAddr = if first.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, first.port()).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, first.port()).into()
    };
    TcpListener::bind(any).map_err(|e| {
        io_error(
            operation,
            format!(
                "rank 0 cannot listen on port {} (of {address}); pick a free MASTER_PORT, or end the job that holds it",
                first.port()
            ),
            e,
        )
    })
}
